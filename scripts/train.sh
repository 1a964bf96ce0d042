#!/usr/bin/env bash
# The main job: trains the `small` GPT-2 (or the model --model names, e.g.
# llama-small) on the Brown corpus with 2 MPI ranks (data parallel, ring
# all-reduce). Runs set-up and data preparation first when
# needed. Extra arguments go to `braid train` (e.g. --steps 50). Draws the
# loss, throughput and memory plots into out/plots/ at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x build/braid ] || bash scripts/setup.sh
[ -f data/brown_train.bin ] && [ -f data/brown_val.bin ] || build/braid prepare-data
NP="${NP:-2}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mkdir -p out
# A sample after training, unless the arguments choose their own (--sample-tokens 0: none).
sample=(--sample-tokens 80 --prompt "The jury said")
# The `small` GPT-2 unless the arguments name a model (--model llama-small).
model=(--model small)
for a in "$@"; do
  case "$a" in
    --sample-tokens|--sample-tokens=*) sample=() ;;
    --model|--model=*) model=() ;;
  esac
done
mpirun --oversubscribe --bind-to none -np "$NP" build/braid train \
  "${model[@]}" --metrics-out out/metrics.jsonl "${sample[@]}" "$@"
# Loss, throughput and memory pictures of the run.
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 tools/plot_metrics.py out/metrics.jsonl --out out/plots
else
  echo "train.sh: no plots (python3-matplotlib is missing: run scripts/setup.sh)"
fi
