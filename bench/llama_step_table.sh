#!/usr/bin/env bash
# llama-small against small on one rank (2 threads), B=8 T=128, fp32 and bf16:
# parameters, median step time, tokens/s and MFU (against the matmul ceiling
# bench-step measures in the same run), ROUNDS rounds (default 3) alternating
# the two models so both see the same load. Prints a markdown table.
#   bench/llama_step_table.sh [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  for prec in fp32 bf16; do
    for m in small llama-small; do
      OMP_NUM_THREADS=2 "$root/build/braid" bench-step --model "$m" --precision "$prec" --batch 8 --seq-len 128 \
        --steps 10 --warmup 3 --json "$out/$m.$prec.$r.json" > /dev/null
    done
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import glob, json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
print("| model | precision | parameters (M) | step ms (median of %d) | tokens/s | MFU step | matmul ceiling GFLOP/s |" % rounds)
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for prec in ("fp32", "bf16"):
    for m in ("small", "llama-small"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{m}.{prec}.*.json"))]
        med = lambda k: statistics.median(r[k] for r in runs)
        print(f"| {m} | {prec} | {runs[0]['params'] / 1e6:.2f} | {med('step_ms'):.1f} | {med('tokens_per_sec'):.1f} | "
              f"{100 * med('mfu'):.1f} % | {med('matmul_ceiling_flops') / 1e9:.0f} |")
PY
