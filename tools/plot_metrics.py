#!/usr/bin/python3
"""Draws `braid train --metrics-out` files as PNGs (matplotlib, Debian's python3-matplotlib).

Usage: /usr/bin/python3 tools/plot_metrics.py METRICS.jsonl [METRICS.jsonl ...] --out DIR [--labels A,B]

Writes into DIR:
  loss.png        training loss per step and validation loss, one colour per file
  throughput.png  tokens/s (all ranks) and MFU per step
  memory.png      peak memory per rank by category (the file's "peak_memory" record),
                  stacked bars; one panel per file
Prints the paths it wrote. Lines that are not step, validation or peak-memory
records (the run record, blank lines) are skipped; a file with no step records
is an error.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CATEGORIES = ["params", "master_params", "grads", "optimizer", "activations", "comm", "workspace"]


def read(path):
    steps, vals, memory, run = [], [], None, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            if "loss" in r and "step" in r:
                steps.append(r)
            elif "val_loss" in r:
                vals.append(r)
            elif "peak_memory" in r:
                memory = r["peak_memory"]
            elif "run" in r and run is None:
                run = r
    if not steps:
        sys.exit(f"{path}: no step records; is it a braid train --metrics-out file?")
    # A resumed run rewrites the steps after its checkpoint: keep the last record of each step.
    by_step = {r["step"]: r for r in steps}
    return [by_step[k] for k in sorted(by_step)], vals, memory, run


def label_of(path, run):
    base = os.path.splitext(os.path.basename(path))[0]
    if run and "config" in run:
        c = run["config"]
        bits = [str(c.get("model", "")), str(c.get("precision", ""))]
        return f"{base} ({', '.join(b for b in bits if b)}, {run.get('ranks', '?')} ranks)"
    return base


def save(fig, axes, legend_ax, out):
    """Step axis on the last panel, grids, the legend, and the PNG."""
    axes[-1].set_xlabel("step")
    for a in axes:
        a.grid(alpha=0.3)
    legend_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_loss(runs, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (label, steps, vals, _) in enumerate(runs):
        color = f"C{i}"
        ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], color=color, lw=1, alpha=0.8,
                label=f"{label}: train")
        if vals:
            ax.plot([v["step"] for v in vals], [v["val_loss"] for v in vals], "o-", color=color, ms=4,
                    label=f"{label}: validation")
    ax.set_ylabel("loss (nats / token)")
    save(fig, [ax], ax, out)


def plot_throughput(runs, out):
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for i, (label, steps, _, _) in enumerate(runs):
        x = [r["step"] for r in steps]
        a1.plot(x, [r["tokens_per_sec"] for r in steps], color=f"C{i}", lw=1, label=label)
        a2.plot(x, [100 * r.get("mfu", 0) for r in steps], color=f"C{i}", lw=1, label=label)
    a1.set_ylabel("tokens / s (all ranks)")
    a2.set_ylabel("MFU (%)")
    save(fig, [a1, a2], a1, out)


def plot_memory(runs, out):
    with_mem = [(label, mem) for label, _, _, mem in runs if mem]
    if not with_mem:
        return False
    fig, axes = plt.subplots(1, len(with_mem), figsize=(4 + 3 * len(with_mem), 4.5), squeeze=False)
    for ax, (label, mem) in zip(axes[0], with_mem):
        ranks = [m["rank"] for m in mem]
        bottom = [0.0] * len(mem)
        for j, cat in enumerate(CATEGORIES):
            mib = [m["bytes"].get(cat, 0) / 2**20 for m in mem]
            ax.bar(ranks, mib, bottom=bottom, color=f"C{j}", label=cat)
            bottom = [b + v for b, v in zip(bottom, mib)]
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("rank")
        ax.set_xticks(ranks)
        ax.set_ylabel("peak memory (MiB)")
        ax.grid(alpha=0.3, axis="y")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--out", required=True, help="directory for the PNGs")
    ap.add_argument("--labels", help="comma-separated labels, one per file")
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else None
    if labels and len(labels) != len(a.metrics):
        sys.exit(f"--labels gives {len(labels)} labels for {len(a.metrics)} files")
    runs = []
    for i, path in enumerate(a.metrics):
        steps, vals, mem, run = read(path)
        runs.append((labels[i] if labels else label_of(path, run), steps, vals, mem))
    os.makedirs(a.out, exist_ok=True)
    written = [os.path.join(a.out, "loss.png"), os.path.join(a.out, "throughput.png")]
    plot_loss(runs, written[0])
    plot_throughput(runs, written[1])
    if plot_memory(runs, os.path.join(a.out, "memory.png")):
        written.append(os.path.join(a.out, "memory.png"))
    for w in written:
        print(w)


if __name__ == "__main__":
    main()
