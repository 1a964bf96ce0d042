#!/usr/bin/env bash
# Every speed figure of docs/BENCHMARKS.md ("Step speed and MFU", "Precision",
# "Collectives") in one run, each beside its ceiling or peer measured in the
# same run, then a table:
#   step    bench-step, gpt2, one rank, THREADS threads: fp32 and bf16 at B=8 T=128
#           and B=4 T=64, bf16 with 4 micro-batches; with BASELINE set (another
#           braid binary), its fp32 and bf16 steps alternated with ours
#           (BASELINE_PRECISIONS="fp32" for a binary whose bench-step has no --precision)
#   fp16    bench-step, gpt2, fp16 with its operands and activations stored in fp16
#           (--matmul-precision half, the default) vs on f32 buffers (fp32), alternated,
#           at B=8 T=128 and B=4 T=64
#   optimizer the optimizer's streaming passes (gradient norm, AdamW, zero fill)
#           beside a memcpy of the same buffers
#   layouts the backward matmuls with and without their transposed copies
#   comm    bench-comm on 2 ranks (ours on private buffers, ours zero-copy on shared buffers, MPI's
#           own; 64 MiB all-reduce vs memcpy): median of 7 runs
#   comm4   all-gather, reduce-scatter, all-to-all on 4 ranks, the same three: median of 7 runs
#   dp      `small`: 2 ranks x 1 thread (DDP, ZeRO-1, and DDP reducing by messages:
#           --no-zero-copy) vs 1 rank x 2 threads
#   reduce  `small` in bf16 on 2 ranks (DDP, ZeRO-2): fp32 gradients (the default)
#           vs --reduce-dtype bf16, bytes sent and step time
# Usage: bench/speed_table.sh [rounds]   (env: BRAID, BASELINE, THREADS, OUT, and
# PARTS: a subset of "step fp16 optimizer layouts comm comm4 dp reduce", all by default)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="${BRAID:-$root/build/braid}"
rounds="${1:-3}"
threads="${THREADS:-2}"
out="${OUT:-$root/out/speed_table}"
parts="${PARTS:-step fp16 optimizer layouts comm comm4 dp reduce}"
py=/usr/bin/python3
want() { [[ " $parts " == *" $1 "* ]]; }
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.jsonl
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

grep -m1 "model name" /proc/cpuinfo | sed 's/^model name\s*: /cpu: /'
echo "flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_tile|avx2|fma)$' | tr '\n' ' ')"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

step() {  # name binary precision B T accum round [bench-step flags]
  OMP_NUM_THREADS="$threads" "$2" bench-step --model gpt2 --precision "$3" --batch "$4" --seq-len "$5" \
    --accum "$6" --steps 3 --warmup 1 --threads "$threads" --json "$out/step_$1_r$7.json" "${@:8}" | sed "s/^/[$1 r$7] /"
}

want step && for r in $(seq 1 "$rounds"); do
  step fp32_8x128 "$braid" fp32 8 128 1 "$r"
  step bf16_8x128 "$braid" bf16 8 128 1 "$r"
  step fp32_4x64 "$braid" fp32 4 64 1 "$r"
  step bf16_4x64 "$braid" bf16 4 64 1 "$r"
  if [ -n "${BASELINE:-}" ]; then
    for bt in "8 128" "4 64"; do
      read -r b t <<<"$bt"
      for p in ${BASELINE_PRECISIONS:-fp32 bf16}; do
        # fp32 without --precision: an older bench-step has none.
        flag=(); [ "$p" = fp32 ] || flag=(--precision "$p")
        name="base_${b}x${t}"; [ "$p" = fp32 ] || name="base_${p}_${b}x${t}"
        OMP_NUM_THREADS="$threads" "$BASELINE" bench-step --model gpt2 "${flag[@]}" --batch "$b" --seq-len "$t" \
          --steps 3 --warmup 1 --threads "$threads" --json "$out/step_${name}_r$r.json" | sed "s/^/[$name r$r] /"
      done
    done
  fi
done
want fp16 && for r in $(seq 1 "$rounds"); do
  for bt in "8 128" "4 64"; do
    read -r b t <<<"$bt"
    step "fp16_${b}x${t}" "$braid" fp16 "$b" "$t" 1 "$r"
    step "fp16_f32buf_${b}x${t}" "$braid" fp16 "$b" "$t" 1 "$r" --matmul-precision fp32
  done
done
if want step; then
  step bf16_8x128_accum4 "$braid" bf16 8 128 4 1
  step fp32_8x128_accum4 "$braid" fp32 8 128 4 1
fi

if want optimizer; then
  echo "== optimizer passes"
  OMP_NUM_THREADS="$threads" "$root/build/tests/test_unit" --gtest_also_run_disabled_tests \
    --gtest_filter='GradSumsq.DISABLED_StreamingRates' | grep -v '^\['
fi

if want layouts; then
  echo "== backward matmul layouts"
  OMP_NUM_THREADS="$threads" "$root/build/tests/test_kernels" --gtest_also_run_disabled_tests \
    --gtest_filter='Gemm.DISABLED_BackwardLayouts' | grep -v '^\['
fi

# 2 ranks: 7 runs, each alternating ours, zero-copy and MPI's per size (single runs vary by ±20 %).
want comm && echo "== collectives, 2 ranks, 7 runs" && for i in 1 2 3 4 5 6 7; do
  mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS=1 "$braid" bench-comm --min-bytes 262144 \
    --ops all_reduce,all_gather,reduce_scatter,all_to_all --json "$out/comm_np2_r$i.json" >/dev/null
done
# 4 ranks on 2 cores (oversubscribed): 7 runs, each alternating ours, zero-copy and MPI's per size.
want comm4 && echo "== collectives, 4 ranks, 7 runs" && for i in 1 2 3 4 5 6 7; do
  mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS=1 "$braid" bench-comm --min-bytes 262144 \
    --ops all_gather,reduce_scatter,all_to_all --json "$out/comm_np4_r$i.json" >/dev/null
done

want dp && echo "== data-parallel scaling, small"
dp_run() {  # name ranks threads [train flags]
  # --bind-to none: by default OpenMPI binds each of <= 2 processes to one core,
  # which would put the single rank's 2 threads on one core.
  OMP_NUM_THREADS="$3" mpirun --oversubscribe --bind-to none -np "$2" -x OMP_NUM_THREADS "$braid" train --model small \
    --batch 16 --micro-batch $((16 / $2)) --steps 12 --warmup 2 --val-every 0 --quiet "${@:4}" \
    --metrics-out "$out/dp_$1.jsonl" >/dev/null
}
want dp && for r in $(seq 1 "$rounds"); do
  dp_run "1x2_r$r" 1 2
  dp_run "2x1_r$r" 2 1
  dp_run "2x1zero1_r$r" 2 1 --zero 1
  dp_run "2x1msg_r$r" 2 1 --no-zero-copy
done

want reduce && echo "== gradient reduce dtype, small, bf16, 2 ranks"
want reduce && for r in $(seq 1 "$rounds"); do
  for z in 0 2; do
    dp_run "reduce_z${z}_fp32_r$r" 2 1 --precision bf16 --zero "$z" --reduce-dtype fp32
    dp_run "reduce_z${z}_bf16_r$r" 2 1 --precision bf16 --zero "$z" --reduce-dtype bf16
  done
done

"$py" "$root/bench/speed_table.py" "$out"
