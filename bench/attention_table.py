#!/usr/bin/python3
"""Table of bench/attention_table.sh's runs (one JSON object per line): per dtype
and T, the median over rounds of forward + backward milliseconds and peak
resident memory of the fused kernel, the unfused one and PyTorch, with the
speed-ups of the fused kernel over each."""
import collections
import json
import statistics
import sys


def main(path):
    runs = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                j = json.loads(line)
                runs[(j["dtype"], j["T"], j["kernel"])].append(j)
    med = lambda rs, key: statistics.median(r[key] for r in rs)
    print("| dtype | T | fused fwd+bwd ms | unfused ms | torch ms | unfused / fused | torch / fused "
          "| fused peak MiB | unfused peak MiB | torch peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dt, T in sorted({(d, t) for d, t, _ in runs}, key=lambda x: (x[0] != "f32", x[1])):
        ms, peak = {}, {}
        for kern in ("fused", "unfused", "torch"):
            rs = runs.get((dt, T, kern))
            ms[kern] = statistics.median(r["forward_ms"] + r["backward_ms"] for r in rs) if rs else None
            peak[kern] = med(rs, "peak_rss_bytes") / 2**20 if rs else None
        f = lambda v, d=1: "-" if v is None else "%.*f" % (d, v)
        ratio = lambda k: "-" if not (ms[k] and ms["fused"]) else "%.2fx" % (ms[k] / ms["fused"])
        print(f"| {dt} | {T} | {f(ms['fused'])} | {f(ms['unfused'])} | {f(ms['torch'])} | {ratio('unfused')} "
              f"| {ratio('torch')} | {f(peak['fused'], 0)} | {f(peak['unfused'], 0)} | {f(peak['torch'], 0)} |")


if __name__ == "__main__":
    main(sys.argv[1])
