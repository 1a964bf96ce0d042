#!/usr/bin/env bash
# Training-step throughput, braid vs PyTorch, measured side by side in one run:
# same model, batch and threads. PyTorch gets its best settings in its own
# command only: the OpenBLAS core-type overrides unset, glibc huge pages on.
# Usage: bench/step_vs_torch.sh [model] [batch] [seq_len] [threads] [rounds]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-gpt2}"; B="${2:-4}"; T="${3:-64}"; threads="${4:-2}"; rounds="${5:-3}"
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  OMP_NUM_THREADS="$threads" "${BRAID:-$root/build/braid}" bench-step --model "$model" --batch "$B" \
    --seq-len "$T" --threads "$threads" --steps 8
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    OMP_NUM_THREADS="$threads" /usr/bin/python3 "$root/bench/torch_step.py" --model "$model" \
    --batch "$B" --seq-len "$T" --threads "$threads" --steps 8
done
