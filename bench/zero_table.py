"""Markdown tables for bench/zero_table.sh (run with /usr/bin/python3).

Reads the work folder the shell script filled (runs.tsv, <tag>.plan from
`braid plan`, and for training runs <tag>.log and <tag>.jsonl) and prints:
  (a) model-state bytes per rank (exact, from `braid plan`) against the ZeRO
      formula, the measured ledger line of the run, the transient comm buffers
      and the total;
  (b) bytes sent per rank per step (rank 0's metrics) against DDP at the same N
      and against a prediction from the shard layout;
  (c) tokens/s per layout.
The shard layout (units, per-tensor or per-unit groups, ceil(len/N) slices) and
the gather schedule mirror src/braid/parallel/data_parallel/sharded.cpp; the parameter table
mirrors model::build_param_table (tensors aligned to 16 floats).
"""
import argparse
import os
import re
import subprocess
import sys

from bench_common import MIB, align, mib, num, parse_ledger_line, parse_metrics, peak_lines

LAYOUT_NAMES = {"ddp": "DDP (ZeRO-0)", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                "fsdp": "FSDP", "hsdp": "HSDP"}
ORDER = ["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
CATS = ["params", "master_params", "grads", "optimizer", "activations", "comm", "workspace"]
STATE_CATS = CATS[:4]



def format_bytes(b):
    """braid's format_bytes (src/braid/core/memory.cpp)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while b >= 1024.0 and u < 4:
        b /= 1024.0
        u += 1
    return "%.0f %s" % (b, units[u]) if u == 0 else "%.1f %s" % (b, units[u])



# ---------------------------------------------------------------- parsing

def parse_plan(text):
    p = {}
    m = re.search(r"model (\S+) \(L=(\d+) H=(\d+) C=(\d+) V=(\d+)->(\d+)", text)
    p["model"], p["L"], p["C"], p["Vp"] = m.group(1), int(m.group(2)), int(m.group(4)), int(m.group(6))
    for c in CATS + ["total"]:
        m = re.search(r"^%s\s+(\d+) \(" % c, text, re.M)
        p[c] = int(m.group(1))  # first column = rank 0
    m = re.search(r"Psi = (\d+) elements.*?N = (\d+) sharding ranks\): (.*?) = (\d+) bytes", text)
    p["psi"], p["formula_N"], p["formula_text"], p["formula_bytes"] = (
        int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))
    m = re.search(r"as `braid train` prints it, rank 0: (.*)$", text, re.M)
    p["ledger_line"] = m.group(1).strip()
    return p





# ---------------------------------------------------------------- formulas

def zero_formula(prec, stage, psi, n):
    """Bytes per rank of params + master + grads + optimizer (Rajbhandari et al. 2020)."""
    if prec == "fp32":  # no separate master: params 4 + grads 4 + Adam moments 8
        f = {0: (16 * psi, "16Ψ"), 1: (8 * psi + 8 * psi / n, "8Ψ+8Ψ/N"),
             2: (4 * psi + 12 * psi / n, "4Ψ+12Ψ/N"), 3: (16 * psi / n, "16Ψ/N")}
    else:  # half params 2 + half grads 2 + fp32 master 4 + moments 8 (K = 12)
        f = {0: (16 * psi, "16Ψ"), 1: (4 * psi + 12 * psi / n, "4Ψ+12Ψ/N"),
             2: (2 * psi + 14 * psi / n, "2Ψ+14Ψ/N"), 3: (16 * psi / n, "16Ψ/N")}
    return f[stage]


STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "hsdp": 3}


class Layout:
    """GPT-2's flat parameter layout split into sharding units and groups."""

    def __init__(self, L, C, Vp, psi):
        blk = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
        self.blk = [align(x) for x in blk]
        self.lnf = [align(C), align(C)]
        wte = align(Vp * C)
        rest = psi - wte - L * sum(self.blk) - sum(self.lnf)
        assert rest > 0 and rest % C == 0, "parameter table does not match Ψ=%d" % psi
        self.emb = [wte, rest]  # wte, wpe (block_size x C)
        self.L, self.C, self.psi = L, C, psi
        assert sum(self.emb) + L * sum(self.blk) + sum(self.lnf) == psi

    def slices(self, n, fsdp):
        """A rank's padded slice per unit: (unit 0, one block, ln_f)."""
        def s(groups):
            groups = [sum(groups)] if fsdp else groups
            return sum((g + n - 1) // n for g in groups)
        return s(self.emb), s(self.blk), s(self.lnf)

    def units(self):
        return sum(self.emb), sum(self.blk), sum(self.lnf)


def predicted_sent(lay, name, prec, n, accum, hsdp_s, bucket_bytes=4 * 1024 * 1024):
    """Collective payload one rank sends per step (scalars excluded)."""
    if n == 1:
        return 0
    b = 4 if prec == "fp32" else 2
    psi, L = lay.psi, lay.L
    if name == "ddp":  # ring / Rabenseifner all-reduce: 2(N-1)/N of the buffer
        return 2 * (n - 1) * psi * b / n
    if name == "zero1":
        # GradBuckets (reduce_scatter), in the compute dtype: buckets of a multiple
        # of N elements from the end; RS + AG of ceil(len/N) each.
        per = max(bucket_bytes // b // n, 1) * n
        hi, tot = psi, 0
        while hi > 0:
            lo = max(hi - per, 0)
            tot += (hi - lo + n - 1) // n
            hi = lo
        return 2 * (n - 1) * tot * b
    fsdp = name in ("fsdp", "hsdp")
    if name == "hsdp":
        s, r = hsdp_s, n // hsdp_s
        inner = stage3_sent(lay, s, accum, b, True)
        e, k, f = lay.slices(s, True)
        shard = e + L * k + f
        return inner + 2 * (r - 1) * shard * b / r  # replicas all-reduce the gradient shard
    if name == "zero2":  # RS every micro-batch + AG of the updated parameters
        e, k, f = lay.slices(n, False)
        return (accum + 1) * (n - 1) * (e + L * k + f) * b
    return stage3_sent(lay, n, accum, b, fsdp)


def stage3_sent(lay, n, accum, b, fsdp):
    """Stage 3: RS of every unit per micro-batch; the first forward gathers every
    unit, backward re-gathers blocks 1..L-1 (unit 0, block L and ln_f stay in
    their slots); later micro-batches find blocks 1 and 2 still gathered, so
    their forward gathers blocks 3..L and ln_f."""
    e, k, f = lay.slices(n, fsdp)
    L = lay.L
    total = e + L * k + f
    elems = accum * total + total + (L - 1) * k + (accum - 1) * ((L - 2) * k + f + (L - 1) * k)
    return (n - 1) * elems * b


def stage3_ratio_formula(lay):
    """Per-step stage-3 traffic over DDP's, one micro-batch, N-independent (slices = Ψ_u/N)."""
    _, blk, _ = lay.units()
    return 1 + (lay.L * blk * (lay.L - 1) / lay.L) / (2 * lay.psi)


# ---------------------------------------------------------------- tables

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--hsdp-s", type=int, default=2)
    ap.add_argument("--braid", required=True)
    a = ap.parse_args()
    train = a.steps > 0

    runs = []
    with open(os.path.join(a.out, "runs.tsv")) as f:
        for line in f:
            prec, n, name, flags, batch = line.rstrip("\n").split("\t")
            tag = "%s_N%s_%s" % (prec, n, name)
            r = {"prec": prec, "N": int(n), "name": name, "flags": flags, "batch": int(batch), "tag": tag}
            with open(os.path.join(a.out, tag + ".plan")) as pf:
                r["plan"] = parse_plan(pf.read())
            if train:
                r["ledger"] = peak_lines(os.path.join(a.out, tag + ".log")).get(0)
                r["metrics"] = parse_metrics(os.path.join(a.out, tag + ".jsonl"))
            runs.append(r)
    runs.sort(key=lambda r: (r["prec"] != "fp32", r["prec"], r["N"], ORDER.index(r["name"])))
    p0 = runs[0]["plan"]
    lay = Layout(p0["L"], p0["C"], p0["Vp"], p0["psi"])
    precs = []
    for r in runs:
        if r["prec"] not in precs:
            precs.append(r["prec"])
    problems = []

    print("### ZeRO table: model %s, Ψ = %s elements incl. alignment gaps (4Ψ = %s MiB)" %
          (a.model, num(lay.psi), mib(4 * lay.psi, 2)))
    if train:
        b0 = runs[0]["batch"]
        print("global batch %d, micro-batch %d, T=%d, %d steps per run, `--backend local`, "
              "OMP_NUM_THREADS=1; accumulation steps = %d/(N·%d)" % (b0, a.micro, a.seq, a.steps, b0, a.micro))
    else:
        print("`braid plan` only; batch N·%d, micro-batch %d, T=%d (model states do not depend on them)" %
              (a.micro, a.micro, a.seq))
    print()

    # (a) model states
    for prec in precs:
        print("#### (a) model states per rank, %s (exact bytes from `braid plan`, rank 0)" % prec)
        print()
        hdr = ["layout", "N", "params", "master", "grads", "optimizer", "model states (bytes)",
               "formula", "formula (bytes)", "plan − formula"]
        if train:
            hdr += ["ledger of the run (MiB)", "check"]
        hdr += ["comm buffers", "total"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + " --- |" * len(hdr))
        for r in (x for x in runs if x["prec"] == prec):
            p = r["plan"]
            stage = STAGE[r["name"]]
            fn = p["formula_N"]
            fb, ftxt = zero_formula(prec, stage, p["psi"], fn)
            if abs(fb - p["formula_bytes"]) > 0.5:
                problems.append("%s: our formula %.0f != braid plan's %d" % (r["tag"], fb, p["formula_bytes"]))
            states = sum(p[c] for c in STATE_CATS)
            nlabel = ftxt.replace("N", str(fn)) if "N" in ftxt else ftxt
            row = [LAYOUT_NAMES[r["name"]] + (" (S=%d)" % fn if r["name"] == "hsdp" else ""), str(r["N"]),
                   mib(p["params"]), mib(p["master_params"]), mib(p["grads"]), mib(p["optimizer"]),
                   "%s (%s MiB)" % (num(states), mib(states, 2)), nlabel, num(round(fb)),
                   "%+d (%+.3f %%)" % (states - round(fb), 100.0 * (states - fb) / fb)]
            if train:
                row += ledger_check(r, p, states, problems)
            row += [mib(p["comm"]) + " MiB", mib(p["total"]) + " MiB"]
            print("| " + " | ".join(row) + " |")
        print()
    print("params, master, grads, optimizer, comm buffers and total in MiB; "
          "comm buffers = the transient gathered units, unit gradients and staging (ledger category comm); "
          "total includes activations and workspace.")
    if train:
        print("check: every category of the run's \"peak memory rank 0\" line (printed to 0.1 MiB) "
              "equals the plan formatted the same way, and the run's peak_mem_bytes equals the plan's "
              "total to the byte; a difference over 0.1 % would be flagged MISMATCH.")
    print()

    if train:
        traffic_table(runs, precs, lay, a, problems)
        speed_table(runs, precs, a)
    else:
        pivot_tables(runs, precs)

    # the stage-3 traffic ratio for this model and gpt2, from the formula and the exact slices
    print("#### stage-3 traffic over DDP's, one micro-batch per step (prediction)")
    print()
    print("| model | L | Ψ | Ψ_blocks | 1 + Ψ_blocks·(L−1)/L / (2Ψ) | exact slices, ZeRO-3, N=4 | N=64 | FSDP N=4 | N=64 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    models = [(a.model, lay)]
    if a.model != "gpt2":
        models.append(("gpt2", layout_of(a.braid, "gpt2")))
    for name, ly in models:
        cells = []
        for fsdp in (False, True):
            for n in (4, 64):
                st = stage3_sent(ly, n, 1, 4, fsdp)
                ddp = 2 * (n - 1) * ly.psi * 4 / n
                cells.append("%.4f" % (st / ddp))
        _, blk, _ = ly.units()
        print("| %s | %d | %s | %s | %.4f | %s |" % (name, ly.L, num(ly.psi), num(ly.L * blk),
                                                    stage3_ratio_formula(ly), " | ".join(cells)))
    print()
    if problems:
        print("PROBLEMS:")
        for s in problems:
            print("- " + s)
    else:
        print("no mismatches.")


def layout_of(braid, model):
    text = subprocess.run([braid, "plan", "--model", model, "--ranks", "1", "--batch", "1", "--micro-batch", "1"],
                          check=True, capture_output=True, text=True).stdout
    p = parse_plan(text)
    return Layout(p["L"], p["C"], p["Vp"], p["psi"])


def ledger_check(r, p, states, problems):
    line = r["ledger"]
    if line is None:
        problems.append("%s: no 'peak memory rank 0' line in the log" % r["tag"])
        return ["(none)", "MISSING"]
    meas = parse_ledger_line(line)
    bad = []
    for c in CATS:
        if format_bytes(p[c]) != format_bytes(meas[c]):
            rel = abs(meas[c] - p[c]) / max(p[c], 1)
            if rel > 0.001:
                bad.append("%s %+.2f %%" % (c, 100.0 * (meas[c] - p[c]) / max(p[c], 1)))
    peak = r["metrics"]["peak_mem"]
    if peak != p["total"]:
        rel = (peak - p["total"]) / p["total"]
        if abs(rel) > 0.001:
            bad.append("total %+.2f %%" % (100.0 * rel))
        else:
            bad.append("total %+d B" % (peak - p["total"]))
    msum = sum(meas[c] for c in STATE_CATS)
    cell = "%s (%s)" % (mib(msum), " + ".join("%.1f" % (meas[c] / MIB) for c in STATE_CATS))
    if bad:
        problems.append("%s: ledger vs plan: %s" % (r["tag"], ", ".join(bad)))
        return [cell, "MISMATCH " + "; ".join(bad)]
    return [cell, "= plan"]


def traffic_table(runs, precs, lay, a, problems):
    print("#### (b) bytes sent per rank per step (rank 0, median of steps 2..%d)" % a.steps)
    print()
    hdr = ["precision", "layout", "N", "accum", "sent per step", "predicted payload", "sent − predicted",
           "DDP at this N", "ratio to DDP", "predicted ratio"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + " --- |" * len(hdr))
    ddp = {(r["prec"], r["N"]): r["metrics"]["sent"] for r in runs if r["name"] == "ddp"}
    ddp_pred = {}
    for r in runs:
        if r["name"] == "ddp":
            accum = r["batch"] // (r["N"] * a.micro)
            ddp_pred[(r["prec"], r["N"])] = predicted_sent(lay, "ddp", r["prec"], r["N"], accum, a.hsdp_s)
    hsdp_note = False
    for r in runs:
        n, accum = r["N"], r["batch"] // (r["N"] * a.micro)
        m = r["metrics"]
        if len(set(m["sent_all"])) > 1:
            problems.append("%s: bytes sent differ between steps: %s" % (r["tag"], m["sent_all"]))
        pred = predicted_sent(lay, r["name"], r["prec"], n, accum, a.hsdp_s)
        d = ddp.get((r["prec"], n))
        dp = ddp_pred.get((r["prec"], n))
        sent = m["sent"]
        uncounted = r["name"] == "hsdp" and pred > 0 and sent < 0.01 * pred
        if uncounted:
            hsdp_note = True
        ratio = "—" if not d else ("(%.4f)†" % (pred / d) if uncounted else "%.4f" % (sent / d))
        pratio = "—" if not dp else "%.4f" % (pred / dp)
        diff = sent - pred
        if not uncounted and pred > 0 and abs(diff) > 0.001 * pred:
            problems.append("%s: sent %d vs predicted %.0f" % (r["tag"], sent, pred))
        print("| %s | %s | %d | %d | %s%s | %s | %s | %s | %s | %s |" % (
            r["prec"], LAYOUT_NAMES[r["name"]], n, accum, num(sent), "†" if uncounted else "",
            num(round(pred)), "—" if uncounted else "%+d" % round(diff), num(d) if d is not None else "—",
            ratio, pratio))
    print()
    print("predicted payload: the collectives' data only (ring/Rabenseifner all-reduce 2(N−1)/N of the "
          "buffer; all-gather and reduce-scatter (N−1) slices of ceil(len/N) per tensor (ZeRO) or unit "
          "(FSDP)); sent − predicted is the scalars (loss average, gradient-norm partial sums) and "
          "small all-reduces taking recursive doubling.")
    if hsdp_note:
        print("† HSDP: `comm_bytes_sent` counts only the world communicator, but HSDP's collectives run on "
              "the shard and replica sub-communicators, so the metric shows just the world's scalars; the "
              "ratio in parentheses uses the predicted payload.")
    print()


def pivot_tables(runs, precs):
    """Plan-only mode: model states and totals per rank, one column per N."""
    ns = sorted({r["N"] for r in runs})
    by = {(r["prec"], r["N"], r["name"]): r for r in runs}
    for what in ("model states", "comm buffers", "total"):
        print("#### %s per rank (MiB)%s" % (what, "; = : `braid plan` equals the formula to the byte"
                                          if what == "model states" else ""))
        print()
        states_table = what == "model states"
        print("| precision | layout | %s" % ("formula | " if states_table else "") +
              " | ".join("N=%d" % n for n in ns) + " |")
        print("|" + " --- |" * (len(ns) + (3 if states_table else 2)))
        for prec in precs:
            for name in ORDER:
                if not any((prec, n, name) in by for n in ns):
                    continue
                cells, ftxt = [], ""
                for n in ns:
                    r = by.get((prec, n, name))
                    if r is None:
                        cells.append("—")
                        continue
                    p = r["plan"]
                    states = sum(p[c] for c in STATE_CATS)
                    fb, ftxt = zero_formula(prec, STAGE[name], p["psi"], p["formula_N"])
                    if what == "model states":
                        cells.append("%s %s" % (mib(states, 2), "=" if states == round(fb) else
                                                "(%+d B)" % (states - round(fb))))
                    else:
                        cells.append(mib(p["comm" if what == "comm buffers" else "total"], 1))
                if name == "hsdp":
                    ftxt = ftxt.replace("N", "S")
                label = LAYOUT_NAMES[name]
                if name == "hsdp":
                    first = next(by[(prec, n, name)] for n in ns if (prec, n, name) in by)
                    label += " (S=%d)" % first["plan"]["formula_N"]
                print("| %s | %s | %s%s |" % (prec, label, ftxt + " | " if states_table else "", " | ".join(cells)))
        print()


def speed_table(runs, precs, a):
    print("#### (c) tokens/s (all ranks together; median of steps 2..%d; one shared 2-core machine, "
          "ranks as threads with OMP_NUM_THREADS=1: noisy)" % a.steps)
    print()
    ns = sorted({r["N"] for r in runs})
    cols = [(p, n) for p in precs for n in ns]
    print("| layout | " + " | ".join("%s N=%d" % c for c in cols) + " |")
    print("|" + " --- |" * (len(cols) + 1))
    by = {(r["prec"], r["N"], r["name"]): r["metrics"]["tok_s"] for r in runs}
    for name in ORDER:
        if not any(r["name"] == name for r in runs):
            continue
        cells = ["%.0f" % by[(p, n, name)] if (p, n, name) in by else "—" for p, n in cols]
        print("| %s | %s |" % (LAYOUT_NAMES[name], " | ".join(cells)))
    print()


if __name__ == "__main__":
    sys.exit(main())
