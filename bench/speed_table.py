"""The table of bench/speed_table.sh from the JSON files it wrote (argument: its folder)."""
import glob
import json
import os
import re
import statistics
import sys


def load_steps(d):
    """{run name: [its JSON records in round order]}, each record with its round as "round"."""
    runs = {}
    for f in glob.glob(os.path.join(d, "step_*_r*.json")):
        m = re.match(r"step_(.+)_r(\d+)\.json", os.path.basename(f))
        if not m:
            continue  # not a file this script writes
        name, rnd = m.groups()
        runs.setdefault(name, []).append(dict(json.load(open(f)), round=int(rnd)))
    for rs in runs.values():
        rs.sort(key=lambda r: r["round"])
    return runs


def paired(xs, ys):
    """The (x, y) records of the rounds both runs have: a ratio compares runs of one round."""
    by_round = {y["round"]: y for y in ys}
    return [(x, by_round[x["round"]]) for x in xs if x["round"] in by_round]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def step_table(runs):
    if not runs:
        return
    print("| run | rounds | step ms | fwd+bwd ms | rest ms | tokens/s | matmul ceiling GFLOP/s (spread) | MFU step | MFU fwd+bwd | step vs FMA peak |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in sorted(runs):
        rs = runs[name]
        get = lambda k: med([r.get(k, float("nan")) for r in rs])
        rest = med([r["step_ms"] - r.get("fwd_bwd_ms", float("nan")) for r in rs])
        print(f"| {name} | {len(rs)} | {get('step_ms'):.0f} | {get('fwd_bwd_ms'):.0f} | {rest:.0f} | {get('tokens_per_sec'):.1f} | "
              f"{get('matmul_ceiling_flops') / 1e9:.0f} ({100 * get('matmul_ceiling_spread'):.0f} %) | "
              f"{100 * get('mfu'):.1f} % | {100 * get('mfu_fwd_bwd'):.1f} % | {100 * get('mfu_fma'):.1f} % |")
    print("\nrest ms = step ms - fwd+bwd ms: the gradient norm, clipping and AdamW (zeroing the gradients counts in fwd+bwd)")
    ratios = [("bf16 / fp32, B=8 T=128", "bf16_8x128", "fp32_8x128"), ("bf16 / fp32, B=4 T=64", "bf16_4x64", "fp32_4x64"),
              ("fp32 / baseline fp32, B=8 T=128", "fp32_8x128", "base_8x128"),
              ("fp32 / baseline fp32, B=4 T=64", "fp32_4x64", "base_4x64"),
              ("bf16 / baseline fp32, B=8 T=128", "bf16_8x128", "base_8x128"),
              ("bf16 / baseline fp32, B=4 T=64", "bf16_4x64", "base_4x64"),
              ("bf16 / baseline bf16, B=8 T=128", "bf16_8x128", "base_bf16_8x128"),
              ("bf16 / baseline bf16, B=4 T=64", "bf16_4x64", "base_bf16_4x64"),
              ("fp16 stored in fp16 / on f32 buffers, B=8 T=128", "fp16_8x128", "fp16_f32buf_8x128"),
              ("fp16 stored in fp16 / on f32 buffers, B=4 T=64", "fp16_4x64", "fp16_f32buf_4x64")]
    for label, a, b in ratios:
        if a in runs and b in runs:
            pairs = paired(runs[a], runs[b])
            if not pairs:
                continue  # no round ran both
            r = med([y["step_ms"] / x["step_ms"] for x, y in pairs])
            print(f"\nstep speed {label}: {r:.2f}x (median over rounds of the step-time ratio)")
            if "activation_bytes" in runs[a][0] and "activation_bytes" in runs[b][0]:
                mib = lambda n, k: runs[n][0][k] / 2**20
                print(f"  activations {mib(a, 'activation_bytes'):.1f} vs {mib(b, 'activation_bytes'):.1f} MiB, "
                      f"peak {mib(a, 'peak_bytes'):.1f} vs {mib(b, 'peak_bytes'):.1f} MiB")


def comm_table(d):
    files = sorted(glob.glob(os.path.join(d, "comm_np2_r*.json")))
    if not files:
        return
    cols = {}
    for f in files:
        for r in json.load(open(f)):
            c = cols.setdefault((r["collective"], r["bytes"]), {})
            for k in ("ours", "zero_copy"):
                if k not in r:
                    continue
                c.setdefault(k, []).append(r[k]["busbw_GBps"])
                c.setdefault(k + "/mpi", []).append(r[k]["busbw_GBps"] / r["native"]["busbw_GBps"])
                c.setdefault(k + "/memcpy", []).append(r[k]["busbw_GBps"] / r["memcpy_GBps"])
            c.setdefault("mpi", []).append(r["native"]["busbw_GBps"])
    zc = any("zero_copy" in c for c in cols.values())
    print(f"\n2 ranks, medians of {len(files)} runs (each alternating ours, zero-copy and MPI's per size):\n")
    head = ["collective", "bytes", "ours busbw GB/s"] + (["zero-copy busbw GB/s"] if zc else []) + \
           ["MPI busbw GB/s", "ours / MPI (min-max)"] + (["zero-copy / MPI (min-max)"] if zc else []) + \
           ["ours / memcpy"] + (["zero-copy / memcpy"] if zc else [])
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    order = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2, "all_to_all": 3, "broadcast": 4}
    span = lambda v: f"{med(v):.2f}x ({min(v):.2f}-{max(v):.2f})"
    for (op, b), c in sorted(cols.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1])):
        row = [op, str(b), f"{med(c['ours']):.2f}"] + ([f"{med(c['zero_copy']):.2f}"] if zc else []) + \
              [f"{med(c['mpi']):.2f}", span(c["ours/mpi"])] + ([span(c["zero_copy/mpi"])] if zc else []) + \
              [f"{med(c['ours/memcpy']):.2f}"] + ([f"{med(c['zero_copy/memcpy']):.2f}"] if zc else [])
        print("| " + " | ".join(row) + " |")
    ceil = [json.load(open(f))[0]["memcpy_GBps"] for f in files]
    print(f"\nmemcpy ceiling (both ranks copying at once): median {med(ceil):.2f} GB/s per rank "
          f"({min(ceil):.2f}-{max(ceil):.2f})")


def comm4_table(d):
    files = sorted(glob.glob(os.path.join(d, "comm_np4_r*.json")))
    if not files:
        return
    ratios = {}
    for f in files:
        for r in json.load(open(f)):
            c = ratios.setdefault((r["collective"], r["bytes"]), {})
            for k in ("ours", "zero_copy"):
                if k + "_over_native" in r:
                    c.setdefault(k, []).append(r[k + "_over_native"])
    zc = any("zero_copy" in c for c in ratios.values())
    print(f"\n4 ranks (oversubscribed), busbw over MPI's, median of {len(files)} runs:\n")
    print("| collective | bytes | ours / MPI (min-max) |" + (" zero-copy / MPI (min-max) |" if zc else ""))
    print("| --- | --- | --- |" + (" --- |" if zc else ""))
    span = lambda v: f"{med(v):.2f}x ({min(v):.2f}-{max(v):.2f})"
    for (op, b), c in sorted(ratios.items()):
        print(f"| {op} | {b} | {span(c['ours'])} |" + (f" {span(c['zero_copy'])} |" if zc else ""))


def dp_table(d):
    def step_ms(f):
        ms = [json.loads(l)["ms"] for l in open(f) if '"ms"' in l][2:]
        return med(ms)
    def runs(name):  # {round: median step ms}
        out = {}
        for f in glob.glob(os.path.join(d, f"dp_{name}_r*.jsonl")):
            m = re.match(rf"dp_{re.escape(name)}_r(\d+)\.jsonl$", os.path.basename(f))
            if m:
                out[int(m.group(1))] = step_ms(f)
        return out
    one = runs("1x2")
    for name, label in (("2x1", "DDP"), ("2x1zero1", "ZeRO-1"), ("2x1msg", "DDP, --no-zero-copy")):
        two = runs(name)
        rounds = sorted(set(one) & set(two))  # a ratio compares runs of one round
        if rounds:
            ratios = [one[r] / two[r] for r in rounds]
            one_ms, two_ms = [one[r] for r in rounds], [two[r] for r in rounds]
            print(f"\ndata parallelism, small, batch 16: 1 rank x 2 threads {med(one_ms):.0f} ms, 2 ranks x 1 thread ({label}) "
                  f"{med(two_ms):.0f} ms per step: 2x1 / 1x2 throughput {med(ratios):.2f}x (median over {len(ratios)} rounds)")


def reduce_table(d):
    def steps(f):
        recs = [json.loads(l) for l in open(f) if '"ms"' in l][2:]
        return med([r["ms"] for r in recs]), med([r["comm_bytes_sent"] for r in recs])
    rows = []
    for z, label in (("0", "DDP"), ("2", "ZeRO-2")):
        got = {}
        for dt in ("fp32", "bf16"):
            rs = [steps(f) for f in sorted(glob.glob(os.path.join(d, f"dp_reduce_z{z}_{dt}_r*.jsonl")))]
            if rs:
                got[dt] = (med([a for a, _ in rs]), med([b for _, b in rs]))
        if len(got) == 2:
            rows.append((label, got))
    if not rows:
        return
    print("\ngradient reduce dtype, small, bf16 compute, 2 ranks x 1 thread, batch 16 (medians):\n")
    print("| layout | fp32 gradients: MiB sent / step, ms | bf16 gradients: MiB sent / step, ms | traffic bf16 / fp32 | step time bf16 / fp32 |")
    print("| --- | --- | --- | --- | --- |")
    for label, g in rows:
        (tf, bf), (th, bh) = g["fp32"], g["bf16"]
        print(f"| {label} | {bf / 2**20:.1f}, {tf:.0f} | {bh / 2**20:.1f}, {th:.0f} | {bh / bf:.3f} | {th / tf:.2f} |")


if __name__ == "__main__":
    d = sys.argv[1]
    step_table(load_steps(d))
    comm_table(d)
    comm4_table(d)
    dp_table(d)
    reduce_table(d)
