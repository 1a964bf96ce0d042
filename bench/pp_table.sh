#!/usr/bin/env bash
# Pipeline parallelism: measured bubble against theory and against the
# simulated schedule, activation memory per stage (naive / GPipe / 1F1B /
# ZB-H1 / interleaved 1F1B), and tokens/s of every 3D layout (TP x DP x PP) of
# 4 ranks.
#
# Usage: bench/pp_table.sh [steps]
#   steps (default 4): optimizer steps per training run; the tables use the
#   median of steps 2..steps (step 1 carries the warm-up).
# Parts (PARTS, default "a b c"):
#   (a) bubble: `braid train --backend local --ranks P --pp P --schedule S
#       --model small --batch m --micro-batch 1 --seq-len 128` for S in naive,
#       gpipe, 1f1b, zb-h1 and interleaved (--virtual-stages 2), P=2 with m in
#       2 4 8 and P=4 with m in 4 8 (4 threads on 2 cores: oversubscribed);
#       interleaved only at P=2 (`small` has 4 layers and it needs P*v <= 4);
#       once with the preset (V = 50257 -> 50304: the
#       last stage also runs the LM head and is far heavier) and once with
#       --vocab-size 1001 on the Brown tokens taken modulo 1001 (stages close
#       to balanced). Each run writes --metrics-out (bubble per step) and
#       --trace-out (forward/backward spans per stage); `braid schedule`
#       gives the simulated bubble with unit costs F=1, B=2 (b=W=1; /v per chunk).
#   (b) activation memory per rank ("peak memory rank R" lines) of the P=2 and
#       P=4, m=8 runs of (a) (preset vocabulary), against `braid plan` and the
#       activation slots of each schedule.
#   (c) tokens/s of TP x DP x PP in {4x1x1, 1x4x1, 1x1x4, 2x2x1, 2x1x2, 1x2x2}
#       on 4 ranks, global batch 8, twice (ROUNDS).
# Prints Markdown tables (bench/pp_table.py). On 2 cores: (a)+(b) 46 runs in
# about 2.5 minutes, (c) 12 runs more (about 1.5 minutes).
#
# Environment: BRAID (binary; default build/braid), OUT (work folder; default
# out/pp_table), TIMEOUT (seconds per run, default 180), PARTS, ROUNDS (default 2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps="${1:-4}"
braid="${BRAID:-$root/build/braid}"
out="${OUT:-$root/out/pp_table}"
TIMEOUT="${TIMEOUT:-180}"
PARTS="${PARTS:-a b c}"
ROUNDS="${ROUNDS:-2}"
SEQ=128
export OMP_NUM_THREADS=1   # ranks are threads of one process on a shared machine
py=/usr/bin/python3

[[ -x "$braid" ]] || { echo "pp_table: no braid binary at $braid (set BRAID=...)" >&2; exit 1; }
if [[ ! -f "$root/data/brown_train.bin" ]]; then
  echo "pp_table: data/brown_train.bin missing; run \`$braid prepare-data\` first" >&2; exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.jsonl "$out"/*.trace.json "$out"/*.sched "$out"/*.plan "$out"/runs.tsv
cd "$root"   # braid train reads data/ relative to the working directory
has() { [[ " $PARTS " == *" $1 "* ]]; }

# run TAG PART RANKS TP DP PP SCHED M VOCAB REP -- braid train flags...
# (SCHED/M: "-" when the layout has no pipeline)
run() {
  local tag=$1 part=$2 ranks=$3 tp=$4 dp=$5 pp=$6 sched=$7 m=$8 vocab=$9 rep=${10}
  shift 11
  printf 'pp_table: %-22s ' "$tag" >&2
  local s=$SECONDS rc=0
  timeout "$TIMEOUT" "$braid" train --backend local --ranks "$ranks" "$@" --seq-len "$SEQ" \
    --steps "$steps" --val-every 0 --metrics-out "$out/$tag.jsonl" --trace-out "$out/$tag.trace.json" \
    > "$out/$tag.log" 2>&1 || rc=$?
  if [[ $rc == 0 ]]; then
    echo "$((SECONDS - s)) s" >&2
  elif [[ $rc == 124 ]]; then
    echo "over ${TIMEOUT} s: dropped" >&2
  else
    echo "failed (rc $rc); see $out/$tag.log" >&2; tail -3 "$out/$tag.log" >&2
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tag" "$part" "$ranks" "$tp" "$dp" "$pp" \
    "$sched" "$m" "$vocab" "$rep" "$rc" "$*" >> "$out/runs.tsv"
}

t0=$SECONDS
if has a || has b; then
  # The balanced variant needs token ids below its vocabulary: Brown ids mod 1001.
  "$py" "$root/bench/pp_table.py" --make-data data/brown_train.bin "$out/brown_v1001_train.bin" 1001
  for vocab in 0 1001; do
    vflags=(); [[ $vocab != 0 ]] && vflags=(--vocab-size "$vocab" --train-data "$out/brown_v1001_train.bin" --val-data "")
    for pm in 2:2 2:4 2:8 4:4 4:8; do
      P=${pm%:*}; m=${pm#*:}
      if ! has a && [[ $m != 8 || $vocab != 0 ]]; then continue; fi   # (b) alone: the m=8 runs
      for S in naive gpipe 1f1b zb-h1 interleaved; do
        vs=()
        if [[ $S == interleaved ]]; then
          # v=2 chunks per rank: P*v <= n_layer = 4, so P=2 only
          if [[ $P != 2 ]]; then
            [[ $vocab == 0 && $m == 8 ]] && echo "pp_table: interleaved skipped at P=$P (needs P*v <= 4 layers)" >&2
            continue
          fi
          vs=(--virtual-stages 2)
        fi
        tag="a_v${vocab}_p${P}_m${m}_${S}"
        run "$tag" a "$P" 1 1 "$P" "$S" "$m" "$vocab" 1 -- --model small "${vflags[@]}" --pp "$P" \
          --schedule "$S" "${vs[@]}" --batch "$m" --micro-batch 1
        "$braid" schedule --pp "$P" --micro-batches "$m" --schedule "$S" "${vs[@]}" > "$out/sched_p${P}_m${m}_${S}.sched"
        if [[ $vocab == 0 ]]; then
          "$braid" plan --model small --ranks "$P" --pp "$P" --schedule "$S" "${vs[@]}" \
            --batch "$m" --micro-batch 1 --seq-len "$SEQ" > "$out/$tag.plan"
        fi
      done
    done
  done
fi
if has c; then
  # tag|ranks|tp|dp|pp|micro-batch: one micro-batch per rank without PP, micro-batch 1 (m = 8/dp) with PP
  layouts="tp4|4|4|1|1|8 dp4|4|1|4|1|2 pp4|4|1|1|4|1 tp2dp2|4|2|2|1|4 tp2pp2|4|2|1|2|1 dp2pp2|4|1|2|2|1"
  for ((r = 1; r <= ROUNDS; r++)); do
    for l in $layouts; do
      IFS='|' read -r name N tp dp pp mb <<< "$l"
      flags=(--model small --batch 8 --micro-batch "$mb")
      [[ $tp != 1 ]] && flags+=(--tp "$tp")
      [[ $pp != 1 ]] && flags+=(--pp "$pp" --schedule 1f1b)
      m=$((8 / (dp * mb)))
      sched=-; [[ $pp != 1 ]] && sched=1f1b
      run "c_${name}_r$r" c "$N" "$tp" "$dp" "$pp" "$sched" "$m" 0 "$r" -- "${flags[@]}"
    done
  done
fi
echo "pp_table: runs done in $((SECONDS - t0)) s; files in $out" >&2

"$py" "$root/bench/pp_table.py" --out "$out" --steps "$steps" --seq "$SEQ" --parts "$PARTS"
