#!/usr/bin/env python3
"""braid plan's step-time model against the published GPT weak-scaling table of
Narayanan et al. (SC21), Megatron-LM's README: one a100-80gb description for
every row (its matmul fraction fitted on the 1.7B row, see the preset), each
row's layout and the assumptions in bench/layouts/megatron_sc21.toml.

usage: bench/megatron_table.py [BRAID] [--search]
Prints a markdown table: predicted vs published TFLOP/s per GPU (Eq. 3's FLOPs
over the predicted step time and the GPUs). With --search, also where
`braid plan --search` ranks each published layout and what it ranks above it.
"""
import json
import os
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flags(a, row):
    return ["--model", "gpt2", "--n-layer", row["layers"], "--n-head", row["heads"], "--n-embd", row["hidden"],
            "--vocab-size", str(a["vocab_size"]), "--block-size", str(a["seq_len"]), "--seq-len", str(a["seq_len"]),
            "--batch", row["batch"], "--micro-batch", str(a["micro_batch"]), "--tp", row["tp"], "--pp", row["pp"],
            "--precision", a["precision"], "--reduce-dtype", a["reduce_dtype"], "--recompute", a["recompute"],
            "--schedule", a["schedule"], "--dropout", str(a["dropout"]), "--bucket-mb", str(a["bucket_mb"])] + ([] if a["overlap"] else ["--no-overlap"])


def main():
    braid = next((x for x in sys.argv[1:] if not x.startswith("--")), os.path.join(ROOT, "build", "braid"))
    search = "--search" in sys.argv
    spec = tomllib.load(open(os.path.join(ROOT, "bench", "layouts", "megatron_sc21.toml"), "rb"))
    a, cols = spec["assumptions"], {k: v.split() for k, v in spec["rows"].items()}
    rows = [{k: cols[k][i] for k in cols} for i in range(len(cols["names"]))]
    print("| model | layers | hidden | heads | TP | PP | GPUs | batch | published TFLOP/s | predicted | error |"
          + (" search rank of the published layout |" if search else ""))
    print("|" + " --- |" * (11 + search))
    errors = []
    for i, r in enumerate(rows):
        cmd = [braid, "plan"] + flags(a, r) + ["--accelerators", r["gpus"], "--cluster", "a100-80gb", "--json"]
        p = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)["prediction"]
        B, s, l, h, V = (float(x) for x in (r["batch"], a["seq_len"], r["layers"], r["hidden"], a["vocab_size"]))
        flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))  # Eq. 3
        got = flops / (float(r["gpus"]) * p["step_s"]) / 1e12
        err = got / float(r["tflops"]) - 1
        if i > 0:
            errors.append(abs(err))
        cell = ""
        if search:
            out = subprocess.run(cmd[:-1] + ["--search", "--top", "5"], check=True, capture_output=True, text=True).stdout
            cell = " " + "; ".join(l.strip() for l in out.splitlines() if "beats it" in l or "your flags" in l) + " |"
        print(f"| {r['names']} | {r['layers']} | {r['hidden']} | {r['heads']} | {r['tp']} | {r['pp']} | {r['gpus']} | "
              f"{r['batch']} | {r['tflops']} | {got:.1f} | {100 * err:+.1f}%{' (fitted)' if i == 0 else ''} |{cell}")
    print(f"\nlargest error over the nine rows not fitted: {100 * max(errors):.1f}%; "
          f"median {100 * sorted(errors)[len(errors) // 2]:.1f}%")


main()
