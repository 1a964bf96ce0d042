#!/usr/bin/env bash
# ZeRO stages 1-3, FSDP, HSDP and mixed precision: model-state memory, traffic
# and tokens/s per rank, against the ZeRO paper's formulas and DDP.
#
# Usage: bench/zero_table.sh [model] [steps]
#   steps > 0 (default 3): for N = 1 2 4, every layout (DDP = --zero 0, ZeRO-1,
#     ZeRO-2, ZeRO-3, FSDP, and HSDP = FSDP sharded within groups of 2 at N = 4)
#     in fp32 and bf16: `braid plan` (exact bytes per category) and
#     `braid train --backend local --ranks N --steps <steps>` (the ledger's
#     "peak memory rank 0" line and rank 0's per-step metrics).
#   steps = 0: `braid plan` only, N = 1 2 4 8 64 (e.g. bench/zero_table.sh gpt2 0).
# Prints Markdown tables (bench/zero_table.py). About 4 minutes for `small` on 2 cores.
#
# Environment: BRAID (binary; default build/braid), OUT (work folder for the
# plans, logs and metrics; default out/zero_table/<model>), NS (rank counts),
# PRECISIONS (default "fp32 bf16"), BATCH / MICRO / SEQ (global batch, micro-batch,
# sequence length; default 8 / 2 / 128; in plan-only mode the batch is N x MICRO),
# HSDP_S / HSDP_NS (HSDP shard size and the N it runs at; default 2 / "4").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-small}"
steps="${2:-3}"
braid="${BRAID:-$root/build/braid}"
out="${OUT:-$root/out/zero_table/$model}"
if [[ "$steps" == 0 ]]; then ns_default="1 2 4 8 64"; else ns_default="1 2 4"; fi
NS="${NS:-$ns_default}"
PRECISIONS="${PRECISIONS:-fp32 bf16}"
BATCH="${BATCH:-8}"; MICRO="${MICRO:-2}"; SEQ="${SEQ:-128}"
HSDP_S="${HSDP_S:-2}"; HSDP_NS="${HSDP_NS:-4}"
export OMP_NUM_THREADS=1   # ranks are threads of one process on a shared machine

[[ -x "$braid" ]] || { echo "zero_table: no braid binary at $braid (set BRAID=...)" >&2; exit 1; }
if [[ "$steps" != 0 && ( ! -f "$root/data/brown_train.bin" || ! -f "$root/data/brown_val.bin" ) ]]; then
  echo "zero_table: data/brown_{train,val}.bin missing; run \`$braid prepare-data\` first" >&2; exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.plan "$out"/*.log "$out"/*.jsonl "$out"/runs.tsv
cd "$root"   # braid train reads data/ relative to the working directory

layouts_for() {   # $1 = N: "name|flags" lines
  echo "ddp|--zero 0"; echo "zero1|--zero 1"; echo "zero2|--zero 2"; echo "zero3|--zero 3"; echo "fsdp|--fsdp"
  for h in $HSDP_NS; do
    [[ "$1" == "$h" ]] && echo "hsdp|--fsdp --fsdp-shard-size $HSDP_S"
  done
  return 0
}

t0=$SECONDS
for prec in $PRECISIONS; do
  for N in $NS; do
    if [[ "$steps" == 0 ]]; then batch=$((N * MICRO)); else batch=$BATCH; fi
    while IFS='|' read -r name flags; do
      tag="${prec}_N${N}_${name}"
      # Half precision reduces its gradients in half precision here, as the
      # ZeRO paper's formulas (Figure 1) assume; braid's default is fp32.
      common=(--model "$model" --precision "$prec" --reduce-dtype "$prec" --batch "$batch" --micro-batch "$MICRO"
              --seq-len "$SEQ")
      # shellcheck disable=SC2086  # flags is a word list on purpose
      "$braid" plan --ranks "$N" $flags "${common[@]}" > "$out/$tag.plan"
      if [[ "$steps" != 0 ]]; then
        printf 'zero_table: %-22s train ... ' "$tag" >&2
        s=$SECONDS
        # shellcheck disable=SC2086
        "$braid" train --backend local --ranks "$N" $flags "${common[@]}" --steps "$steps" \
          --val-every 0 --metrics-out "$out/$tag.jsonl" > "$out/$tag.log" 2>&1 \
          || { echo "failed; see $out/$tag.log" >&2; tail -5 "$out/$tag.log" >&2; exit 1; }
        echo "$((SECONDS - s)) s" >&2
      fi
      printf '%s\t%s\t%s\t%s\t%s\n' "$prec" "$N" "$name" "$flags" "$batch" >> "$out/runs.tsv"
    done < <(layouts_for "$N")
  done
done
echo "zero_table: runs done in $((SECONDS - t0)) s; files in $out" >&2

/usr/bin/python3 "$root/bench/zero_table.py" --out "$out" --model "$model" --steps "$steps" \
  --micro "$MICRO" --seq "$SEQ" --hsdp-s "$HSDP_S" --braid "$braid"
