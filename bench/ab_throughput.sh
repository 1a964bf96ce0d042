#!/usr/bin/env bash
# Step time of two braid binaries, alternated so that both see the same load:
# bench-step (one rank, small, B=8 T=256: its median step) and `braid train`
# with ranks as threads (1 rank, and 2-rank DDP: the median of steps 6..25),
# ROUNDS rounds (default 5) of old then new. Prints each run and the median
# ratio new/old. For checking that a change keeps step throughput.
#   bench/ab_throughput.sh OLD_BRAID NEW_BRAID [ROUNDS]
set -euo pipefail
old="$1" new="$2" rounds="${3:-5}"
py=/usr/bin/python3

bench() {
  local f; f=$(mktemp)
  OMP_NUM_THREADS=2 "$1" bench-step --model small --batch 8 --seq-len 256 --steps 10 --warmup 3 --json "$f" >/dev/null
  $py -c "import json, sys; print('%.2f' % json.load(open(sys.argv[1]))['step_ms'])" "$f"
  rm -f "$f"
}
train() {
  local f; f=$(mktemp)
  OMP_NUM_THREADS=$((2 / $2)) "$1" train --backend local --ranks "$2" --model small --steps 25 --batch 8 \
    --micro-batch 4 --val-every 0 --warmup 5 --quiet --metrics-out "$f" >/dev/null 2>&1
  $py -c "
import json, statistics, sys
ms = [json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"ms\"' in l][5:]
print('%.2f' % statistics.median(ms))" "$f"
  rm -f "$f"
}
summary() {
  $py -c "
import statistics, sys
o = [float(x) for x in sys.argv[2].split()]; n = [float(x) for x in sys.argv[3].split()]
print('%s: old %s | new %s | median old %.1f ms, new %.1f ms, new/old %.4f'
      % (sys.argv[1], o, n, statistics.median(o), statistics.median(n), statistics.median(n) / statistics.median(o)))
" "$1" "$2" "$3"
}

o=() n=()
for _ in $(seq "$rounds"); do o+=("$(bench "$old")"); n+=("$(bench "$new")"); done
summary "bench-step small" "${o[*]}" "${n[*]}"
for ranks in 1 2; do
  o=() n=()
  for _ in $(seq "$rounds"); do o+=("$(train "$old" "$ranks")"); n+=("$(train "$new" "$ranks")"); done
  summary "train, $ranks rank(s)" "${o[*]}" "${n[*]}"
done
