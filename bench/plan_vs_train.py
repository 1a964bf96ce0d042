#!/usr/bin/env python3
"""braid plan's step-time model against `braid train` on this machine.

For each layout of bench/layouts/this_machine.toml, the machine is measured
(`mpirun -np CORES braid plan --print-cluster this-machine`: one compute thread
per rank, as every run here uses, the links between MPI processes) right before the run, so that a slow spell of a shared host moves
the prediction and the measurement alike; then the predicted step time (`braid
plan --cluster FILE --json`) stands beside the measured one (median `ms` of the
steps after the first, which carries the warm-up, in `--metrics-out`). Rows of more ranks than the machine has cores run
oversubscribed: shown, kept out of the median.

usage: bench/plan_vs_train.py [BRAID] [--only NAME,...] [--steps N] [--out DIR]
Prints a markdown table and the median and largest error over the rows counted.
Logs and metrics stay in DIR (default out/plan_vs_train). The rows train on the
Brown corpus, tokenized first (`braid prepare-data`) when data/ lacks it.
"""
import json
import os
import statistics
import subprocess
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import parse_metrics  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


def mpirun(ranks):
    return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env(), cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\nsee {log}")


def main():
    positional = [x for i, x in enumerate(sys.argv[1:], 1)
                  if not x.startswith("--") and sys.argv[i - 1] not in ("--only", "--steps", "--out")]
    braid = os.path.abspath(positional[0]) if positional else os.path.join(ROOT, "build", "braid")
    out = os.path.abspath(arg("--out", os.path.join(ROOT, "out", "plan_vs_train")))
    steps = int(arg("--steps", "8"))
    only = set(arg("--only", "").split(",")) - {""}
    os.makedirs(out, exist_ok=True)
    spec = tomllib.load(open(os.path.join(ROOT, "bench", "layouts", "this_machine.toml"), "rb"))
    cores = os.cpu_count() or 1
    unknown = only - {row["name"] for row in spec["layout"]}
    if unknown:
        sys.exit(f"--only: no layout named {', '.join(sorted(unknown))} in bench/layouts/this_machine.toml")
    if not os.path.exists(os.path.join(ROOT, "data", "brown_train.bin")):
        run([braid, "prepare-data"], os.path.join(out, "prepare-data.log"))  # the default corpus the rows train on

    print(f"clusters measured before each row: {out}/NAME.cluster.toml\n")
    print("| layout | ranks | flags | predicted ms | measured ms | error | predicted breakdown (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    errors = []
    for row in spec["layout"]:
        name, ranks, flags = row["name"], int(row["ranks"]), row["flags"].split()
        if only and name not in only:
            continue
        cluster = os.path.join(out, name + ".cluster.toml")
        with open(cluster, "w") as f:
            subprocess.run(mpirun(cores) + [braid, "plan", "--print-cluster", "this-machine"], stdout=f, check=True,
                           env=env())
        plan = subprocess.run([braid, "plan", "--ranks", str(ranks), "--cluster", cluster, "--json"] + flags,
                              check=True, capture_output=True, text=True, env=env()).stdout
        p = json.loads(plan)["prediction"]
        metrics = os.path.join(out, name + ".jsonl")
        train = [braid, "train", "--steps", str(steps), "--warmup", "1", "--val-every", "0", "--quiet",
                 "--metrics-out", metrics] + flags
        if ranks > 1:
            train = mpirun(ranks) + train
        run(train, os.path.join(out, name + ".log"))
        measured = parse_metrics(metrics)["ms"] / 1e3
        err = p["step_s"] / measured - 1
        counted = ranks <= cores
        if counted:
            errors.append(abs(err))
        parts = ", ".join(f"{k[:-2]} {1e3 * p[k]:.0f}" for k in
                          ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_exposed_s", "optimizer_s") if p[k] > 0)
        print(f"| {name} | {ranks}{'' if counted else ' (oversubscribed)'} | `{' '.join(flags)}` | "
              f"{1e3 * p['step_s']:.0f} | {1e3 * measured:.0f} | {100 * err:+.1f}% | {parts} |", flush=True)
    if errors:
        print(f"\n{len(errors)} rows counted: median error {100 * statistics.median(errors):.1f}%, "
              f"largest {100 * max(errors):.1f}%")


main()
