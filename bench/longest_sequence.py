#!/usr/bin/python3
"""The longest sequence that trains within a per-rank memory budget
(docs/BENCHMARKS.md, "Attention"): bisects T (a multiple of --step) for
`braid plan --model MODEL --block-size T --seq-len T --batch 1 [EXTRA]` until
the plan's largest rank exceeds the budget, then, with --check, runs one
training step at that T under `--max-memory BUDGET` and reports the step's
ledger peak and the process's peak resident memory.

Usage: /usr/bin/python3 bench/longest_sequence.py [--braid BIN] [--model small]
       [--budget 12GiB] [--step 256] [--extra "ARGS"] [--plan-extra "--ranks 2"]
       [--launch "mpirun -np 2 ..."] [--check]
"""
import argparse
import re
import resource
import shlex
import subprocess
import sys

UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def parse_bytes(s):
    m = re.fullmatch(r"([\d.]+)\s*(KiB|MiB|GiB|TiB)?", s)
    return int(float(m.group(1)) * UNITS.get(m.group(2), 1))


def planned_peak(a, T):
    cmd = [a.braid, "plan", "--model", a.model, "--block-size", str(T), "--seq-len", str(T), "--batch", "1"]
    cmd += shlex.split(a.extra) + shlex.split(a.plan_extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "plan failed"
    m = re.search(r"largest rank: (\d+) bytes", out.stdout)
    return int(m.group(1)), ""


def longest(a, budget):
    lo, hi = 0, a.step
    while True:  # grow until the plan no longer fits
        peak, why = planned_peak(a, hi)
        if peak is None or peak > budget:
            break
        lo, hi = hi, hi * 2
    while hi - lo > a.step:  # the largest multiple of step that fits
        mid = (lo + hi) // 2 // a.step * a.step
        peak, _ = planned_peak(a, mid)
        lo, hi = (mid, hi) if peak is not None and peak <= budget else (lo, mid)
    return lo


def check(a, T, budget_str):
    cmd = shlex.split(a.launch) + [a.braid, "train", "--model", a.model, "--block-size", str(T), "--seq-len",
                                   str(T), "--batch", "1", "--steps", "1", "--val-every", "0",
                                   "--max-memory", budget_str] + shlex.split(a.extra)
    out = subprocess.run(cmd, capture_output=True, text=True)
    peak = re.findall(r"peak memory rank \d+: .*total=([\d.]+ \w+)", out.stdout + out.stderr)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return out.returncode, peak, rss, (out.stdout + out.stderr).strip().splitlines()[-3:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--braid", default="build/braid")
    ap.add_argument("--model", default="small")
    ap.add_argument("--budget", default="12GiB")
    ap.add_argument("--step", type=int, default=256)
    ap.add_argument("--extra", default="")
    ap.add_argument("--plan-extra", default="", help="flags for braid plan only (--ranks N)")
    ap.add_argument("--launch", default="")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    budget = parse_bytes(a.budget)
    T = longest(a, budget)
    peak, _ = planned_peak(a, T)
    print(f"{a.braid} {a.extra}: longest T = {T} (planned largest rank {peak / 2**30:.2f} GiB of {a.budget})")
    if a.check and T:
        rc, ledger, rss, tail = check(a, T, a.budget)
        print(f"  one step at T = {T}: exit {rc}, ledger peak {ledger}, peak RSS {rss / 2**30:.2f} GiB")
        if rc:
            print("\n".join("  " + l for l in tail))
            sys.exit(1)


if __name__ == "__main__":
    main()
