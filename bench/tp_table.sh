#!/usr/bin/env bash
# Tensor parallelism (Megatron column/row-parallel layers, vocab-parallel
# embedding and loss, optional sequence parallelism) and DP x TP: memory per
# rank by category, bytes sent per rank per step and tokens/s, against
# `braid plan` and an analytic traffic model of GPT::forward / GPT::backward.
#
# Usage: bench/tp_table.sh [model] [steps]
#   model: small (default) or gpt2 (any preset whose n_head TP divides).
#   steps > 0 (default 4 for small, 3 for gpt2): every layout below runs
#     `braid plan` (exact bytes per category, every rank) and
#     `braid train --backend local --ranks N --steps <steps> --val-every 0`
#     (the ledger's "peak memory rank R" lines and rank 0's per-step metrics).
#     A run that exceeds TIMEOUT seconds is dropped and its row is plan-only.
#   steps = 0: `braid plan` only.
# Layouts: TP=1 (1 rank), TP=2, TP=2+SP (2 ranks), TP=4, TP=4+SP (4 ranks,
# oversubscribed on 2 cores), DP=2 x TP=2 with ZeRO-0 and ZeRO-1 (4 ranks).
# Prints Markdown tables (bench/tp_table.py). About 1 minute for `small` and
# 2 minutes for `gpt2` on 2 cores.
#
# Environment: BRAID (binary; default build/braid), OUT (work folder for the
# plans, logs and metrics; default out/tp_table/<model>), BATCH / MICRO / SEQ
# (batch per DP replica, micro-batch, sequence length; default 4 / 4 / 128 for
# small, 1 / 1 / 128 otherwise; one micro-batch per rank: the DP rows run a
# global batch of 2 x BATCH), TIMEOUT (seconds per training run, default 180),
# LAYOUTS (names to run, default all: tp1 tp2 tp2sp tp4 tp4sp dp2tp2 dp2tp2z1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-small}"
if [[ "$model" == small ]]; then steps_default=4; else steps_default=3; fi
steps="${2:-$steps_default}"
braid="${BRAID:-$root/build/braid}"
out="${OUT:-$root/out/tp_table/$model}"
if [[ "$model" == small ]]; then b_default=4; m_default=4; else b_default=1; m_default=1; fi
BATCH="${BATCH:-$b_default}"; MICRO="${MICRO:-$m_default}"; SEQ="${SEQ:-128}"
TIMEOUT="${TIMEOUT:-180}"
LAYOUTS="${LAYOUTS:-tp1 tp2 tp2sp tp4 tp4sp dp2tp2 dp2tp2z1}"
export OMP_NUM_THREADS=1   # ranks are threads of one process on a shared machine

[[ -x "$braid" ]] || { echo "tp_table: no braid binary at $braid (set BRAID=...)" >&2; exit 1; }
if [[ "$steps" != 0 && ( ! -f "$root/data/brown_train.bin" || ! -f "$root/data/brown_val.bin" ) ]]; then
  echo "tp_table: data/brown_{train,val}.bin missing; run \`$braid prepare-data\` first" >&2; exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.plan "$out"/*.log "$out"/*.jsonl "$out"/runs.tsv
cd "$root"   # braid train reads data/ relative to the working directory

# name|ranks|dp|flags
layout_line() {
  case "$1" in
    tp1)      echo "tp1|1|1|--tp 1" ;;
    tp2)      echo "tp2|2|1|--tp 2" ;;
    tp2sp)    echo "tp2sp|2|1|--tp 2 --sequence-parallel" ;;
    tp4)      echo "tp4|4|1|--tp 4" ;;
    tp4sp)    echo "tp4sp|4|1|--tp 4 --sequence-parallel" ;;
    dp2tp2)   echo "dp2tp2|4|2|--tp 2 --zero 0" ;;
    dp2tp2z1) echo "dp2tp2z1|4|2|--tp 2 --zero 1" ;;
    *) echo "tp_table: unknown layout '$1'" >&2; exit 1 ;;
  esac
}

t0=$SECONDS
for name in $LAYOUTS; do
  IFS='|' read -r tag N dp flags < <(layout_line "$name")
  batch=$((dp * BATCH))
  common=(--model "$model" --batch "$batch" --micro-batch "$MICRO" --seq-len "$SEQ")
  # shellcheck disable=SC2086  # flags is a word list on purpose
  "$braid" plan --ranks "$N" $flags "${common[@]}" > "$out/$tag.plan"
  trained=0
  if [[ "$steps" != 0 ]]; then
    printf 'tp_table: %-10s train ... ' "$tag" >&2
    s=$SECONDS
    rc=0
    # shellcheck disable=SC2086
    timeout "$TIMEOUT" "$braid" train --backend local --ranks "$N" $flags "${common[@]}" --steps "$steps" \
      --val-every 0 --metrics-out "$out/$tag.jsonl" > "$out/$tag.log" 2>&1 || rc=$?
    if [[ $rc == 0 ]]; then
      trained=1
      echo "$((SECONDS - s)) s" >&2
    elif [[ $rc == 124 ]]; then
      echo "over ${TIMEOUT} s: dropped, plan only" >&2
      rm -f "$out/$tag.jsonl"
    else
      echo "failed; see $out/$tag.log" >&2; tail -5 "$out/$tag.log" >&2; exit 1
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$N" "$dp" "$flags" "$batch" "$trained" >> "$out/runs.tsv"
done
echo "tp_table: runs done in $((SECONDS - t0)) s; files in $out" >&2

/usr/bin/python3 "$root/bench/tp_table.py" --out "$out" --model "$model" --steps "$steps" \
  --micro "$MICRO" --seq "$SEQ"
