#!/usr/bin/env python3
"""braid plan's step time against braid train on emulated hosts (scripts/cluster.sh,
needs root): 2 hosts x 2 ranks over one shaped link, DDP, ZeRO-1 and FSDP.

The cluster file is measured, not written by hand: the compute and the links inside
a host by `braid plan --print-cluster this-machine` under mpirun with 4 ranks on this
machine (the contention of the 4 emulated ranks on its cores), then 2 accelerators
per node and the link between the hosts from `braid bench-comm --ops link` over the
emulated link (the payload rate of one host's uplink with every rank streaming; the
latency from a 4 KiB exchange less its transfer time). Measured: the median `ms` of
the steps after the first (`--metrics-out`).

usage: sudo bench/cluster_plan_vs_train.py [RATE=1gbit] [--steps N] [--out DIR]
"""
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import parse_metrics  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BRAID = os.path.join(ROOT, "build", "braid")
CLUSTER = os.path.join(ROOT, "scripts", "cluster.sh")
LAYOUTS = [("ddp", "--model tiny --batch 16"), ("zero1", "--model tiny --batch 16 --zero 1"),
           ("fsdp", "--model tiny --batch 16 --fsdp")]


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           BRAID_CLUSTER="bp")


def sh(cmd, log=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT)
    if log:
        open(log, "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def on_hosts(cmd, log=None):
    return sh([CLUSTER, "run", "--hosts", "2 2", "--"] + cmd, log)


def link(out, nbytes):
    path = os.path.join(out, f"link-{nbytes}.json")
    on_hosts([BRAID, "bench-comm", "--ops", "link", "--algos", "ring", "--zero-copy", "0", "--min-bytes",
              str(nbytes), "--max-bytes", str(nbytes), "--iters", "7", "--warmup", "2", "--json", path])
    return json.load(open(path))[0]["ours"]


def cluster_file(out):
    here = sh(["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", BRAID, "plan", "--print-cluster",
               "this-machine"])
    big = link(out, 16 << 20)
    rate = big["busbw_GBps"]  # payload bytes one uplink carries per second, GB/s
    small = link(out, 4096)
    latency_us = max(1.0, small["time_us"] - 4096 / (rate * 1e9) * 1e6)
    text = re.sub(r"(?m)^accelerators_per_node = .*$", "accelerators_per_node = 2", here)
    text = re.sub(r"(?ms)^\[inter_node\].*?(?=^\[|\Z)", "", text).rstrip() + "\n"
    text += (f"\n# the emulated link, measured by bench-comm --ops link\n[inter_node]\n"
             f"bandwidth_gbs = {rate:.4f}\nlatency_us = {latency_us:.0f}\nlinks_per_node = 1\n")
    path = os.path.join(out, "emulated.toml")
    open(path, "w").write(text)
    return path, rate, latency_us


def main():
    rate = next((a for a in sys.argv[1:] if not a.startswith("--") and sys.argv[sys.argv.index(a) - 1]
                 not in ("--steps", "--out")), "1gbit")
    out = os.path.abspath(arg("--out", os.path.join(ROOT, "out", "cluster_plan_vs_train")))
    steps = arg("--steps", "8")
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(os.path.join(ROOT, "data", "brown_train.bin")):
        sh([BRAID, "prepare-data"])
    subprocess.run([CLUSTER, "down"], env=ENV, capture_output=True)
    sh([CLUSTER, "up", "2", "--rate", rate])
    try:
        path, bw, lat = cluster_file(out)
        print(f"cluster file {path}: link {bw * 1e3:.1f} MB/s per uplink (payload), latency {lat:.0f} us\n")
        print("| layout | flags | predicted ms | measured ms | error | predicted breakdown (ms) |")
        print("| --- | --- | --- | --- | --- | --- |")
        errors = []
        for name, flags in LAYOUTS:
            f = flags.split()
            p = json.loads(sh([BRAID, "plan", "--ranks", "4", "--cluster", path, "--json"] + f))["prediction"]
            metrics = os.path.join(out, name + ".jsonl")
            on_hosts([BRAID, "train", "--steps", steps, "--warmup", "1", "--val-every", "0", "--quiet",
                      "--metrics-out", metrics] + f, os.path.join(out, name + ".log"))
            measured = parse_metrics(metrics)["ms"] / 1e3
            err = p["step_s"] / measured - 1
            errors.append(abs(err))
            parts = ", ".join(f"{k[:-2]} {1e3 * p[k]:.0f}" for k in
                              ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_exposed_s", "optimizer_s")
                              if p[k] > 0)
            print(f"| {name} | `{flags}` | {1e3 * p['step_s']:.0f} | {1e3 * measured:.0f} | {100 * err:+.1f}% | "
                  f"{parts} |", flush=True)
        print(f"\nmedian error {100 * statistics.median(errors):.1f}%, largest {100 * max(errors):.1f}%")
    finally:
        subprocess.run([CLUSTER, "down"], env=ENV, capture_output=True)


main()
