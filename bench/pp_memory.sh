#!/usr/bin/env bash
# Pipeline activation memory per stage: schedule (GPipe, 1F1B, ZB-H1,
# interleaved) x activation checkpointing (--recompute none / selective / full),
# `small`, P = 2, m = 8 micro-batches of 1 x 128 tokens. For every row `braid
# plan` predicts each rank's activation bytes and one training step measures
# them (the "peak memory rank R" ledger lines); the table shows both.
#
# Usage: bench/pp_memory.sh            (about 1 minute on 2 cores)
# Environment: BRAID (binary; default build/braid), OUT (default out/pp_memory).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="${BRAID:-$root/build/braid}"
out="${OUT:-$root/out/pp_memory}"
export OMP_NUM_THREADS=1
[[ -x "$braid" ]] || { echo "pp_memory: no braid binary at $braid (set BRAID=...)" >&2; exit 1; }
[[ -f "$root/data/brown_train.bin" ]] || { echo "pp_memory: run \`$braid prepare-data\` first" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.plan "$out"/rows.tsv
cd "$root"
flags=(--model small --pp 2 --batch 8 --micro-batch 1 --seq-len 128)
for row in gpipe:1:none gpipe:1:selective gpipe:1:full 1f1b:1:none 1f1b:1:selective 1f1b:1:full \
           zb-h1:1:none interleaved:2:none interleaved:2:selective interleaved:2:full; do
  IFS=: read -r S v R <<< "$row"
  tag="${S}_${R}"
  "$braid" plan --ranks 2 "${flags[@]}" --schedule "$S" --virtual-stages "$v" --recompute "$R" > "$out/$tag.plan"
  "$braid" train --backend local --ranks 2 "${flags[@]}" --schedule "$S" --virtual-stages "$v" --recompute "$R" \
    --steps 1 --val-every 0 > "$out/$tag.log" 2>&1
  printf '%s\t%s\t%s\n' "$S" "$v" "$R" >> "$out/rows.tsv"
done
/usr/bin/python3 - "$out" "$root/bench" <<'PY'
import os, re, sys
sys.path.insert(0, sys.argv[2])
from bench_common import mib, parse_ledger_line, peak_lines
out = sys.argv[1]
print("| schedule | recompute | activations rank 0 (MiB) | activations rank 1 (MiB) | largest rank total (MiB) | measured = plan |")
print("| --- | --- | --- | --- | --- | --- |")
for line in open(os.path.join(out, "rows.tsv")):
    S, v, R = line.split()
    tag = "%s_%s" % (S, R)
    plan = open(os.path.join(out, tag + ".plan")).read()
    acts = [int(x) for x in re.findall(r"(\d+) \(", re.search(r"^activations\s+(.*)$", plan, re.M).group(1))]
    got = {r: parse_ledger_line(l) for r, l in peak_lines(os.path.join(out, tag + ".log")).items()}
    planned = dict(re.findall(r"as `braid train` prints it, rank (\d+): (.*)$", plan, re.M))
    same = all(peak_lines(os.path.join(out, tag + ".log"))[r] == planned[str(r)].strip() for r in got)
    total = max(g["total"] for g in got.values())
    name = S + (" (v=%s)" % v if v != "1" else "")
    print("| %s | %s | %s | %s | %s | %s |" % (name, R, mib(acts[0]), mib(acts[1]), mib(total), "yes" if same else "NO"))
PY
