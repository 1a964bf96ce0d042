#!/usr/bin/env python3
"""Table of bench/cluster_table.sh's rows: busbw, the bytes through one host's uplink
per call (tc's counters), that over the buffer, and link utilisation = uplink bytes /
time / the link's rate measured by `bench-comm --ops link` in the same run (the
best of its sizes; wire bytes on both sides, so headers count alike).

usage: cluster_table.py ROWS.jsonl RATE
"""
import json
import sys


def load(rows_path):
    rows = []
    for line in open(rows_path):
        r = json.loads(line)
        res = json.load(open(r["json"]))[0]
        r["timing"] = res.get("native") if r["path"] == "mpi" else res.get("ours")
        rows.append(r)
    return rows


def main():
    rows, rate = load(sys.argv[1]), sys.argv[2]
    links = [r for r in rows if r["op"] == "link"]

    def wire(r):
        return r["uplink_bytes_per_call"] / (r["timing"]["time_us"] * 1e-6)

    big = max(links, key=wire)  # the best the link gave the ranks: the ceiling
    wire_rate = wire(big)
    print(f"link (tbf {rate}): bench-comm --ops link, 2 ranks per host streaming at once: "
          f"{big['timing']['busbw_GBps'] * 1e3:.1f} MB/s of payload per uplink, "
          f"{wire_rate / 1e6:.1f} MB/s on the wire (tc); utilisation below is against the wire rate\n")
    print("| collective | bytes | path | time ms | busbw MB/s | uplink MiB / call | uplink / buffer | link utilisation |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    by = {}
    for r in rows:
        if r["op"] == "link":
            continue
        t = r["timing"]["time_us"] * 1e-6
        up = r["uplink_bytes_per_call"]
        util = up / t / wire_rate
        by[(r["op"], r["bytes"], r["path"])] = r["timing"]["busbw_GBps"]
        size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else f"{r['bytes'] >> 10} KiB"
        print(f"| {r['op']} | {size} | {r['path']} | {t * 1e3:.1f} | {r['timing']['busbw_GBps'] * 1e3:.1f} | "
              f"{up / 2**20:.2f} | {up / r['bytes']:.3f} | {util * 100:.0f} % |")
    print("\n| collective | bytes | hierarchical / flat | hierarchical / MPI |")
    print("|---|---:|---:|---:|")
    for (op, b, path), bw in sorted(by.items()):
        if path != "hierarchical":
            continue
        size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
        print(f"| {op} | {size} | {bw / by[(op, b, 'flat')]:.2f}x | {bw / by[(op, b, 'mpi')]:.2f}x |")


if __name__ == "__main__":
    main()
