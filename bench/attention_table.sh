#!/usr/bin/env bash
# Attention alone (docs/BENCHMARKS.md, "Attention"): forward + backward of causal
# self-attention, batch 1, 12 heads of 64, T = 256 .. 8,192, f32 and bf16, for
#   fused    braid's fused O(T)-memory kernel (kernels/cpu/flash_attention.h)
#   unfused  braid's kernel that saves the B x heads x T x T probabilities
#   torch    PyTorch's explicit softmax(Q K^T) V (bench/torch_attention.py)
# each in a process of its own (its peak resident memory is its own), the three
# alternated per shape, ROUNDS times (PyTorch from T = 4,096 once: one pass
# takes seconds); the table gives the medians over rounds.
# Usage: bench/attention_table.sh [rounds]   (env: BRAID, THREADS, OUT, TS, DTYPES)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="${BRAID:-$root/build/braid}"
rounds="${1:-3}"
threads="${THREADS:-2}"
out="${OUT:-$root/out/attention_table}"
ts="${TS:-256 512 1024 2048 4096 8192}"
dtypes="${DTYPES:-f32 bf16}"
mkdir -p "$out"
: >"$out/runs.jsonl"
grep -m1 "model name" /proc/cpuinfo | sed 's/^model name\s*: /cpu: /'
echo "flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_bf16|avx512_fp16|amx_bf16)$' | tr '\n' ' ')"
for r in $(seq 1 "$rounds"); do
  for dt in $dtypes; do
    for T in $ts; do
      for kernel in fused unfused; do
        OMP_NUM_THREADS="$threads" "$braid" bench-attention --kernel "$kernel" --dtype "$dt" --seq-len "$T" \
          --reps 3 --threads "$threads" | tee -a "$out/runs.jsonl"
      done
      # The peer runs with OpenBLAS at its full speed. Its explicit attention
      # takes seconds a pass from T = 4,096: there it is timed once, in round 1.
      reps=3
      if [ "$T" -ge 4096 ]; then reps=1; [ "$r" -eq 1 ] || continue; fi
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" /usr/bin/python3 \
        "$root/bench/torch_attention.py" --seq-len "$T" --dtype "$dt" --reps "$reps" --threads "$threads" |
        tee -a "$out/runs.jsonl"
    done
  done
done
/usr/bin/python3 "$root/bench/attention_table.py" "$out/runs.jsonl" | tee "$out/table.md"
