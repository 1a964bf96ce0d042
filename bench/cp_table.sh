#!/usr/bin/env bash
# Context parallelism's step time (docs/BENCHMARKS.md, "Attention and long
# sequences"): `small --block-size 8192`, batch 1, T = 4,096 and 8,192, one rank
# x 2 threads against --cp 2 on 2 ranks x 1 thread, alternated ROUNDS times;
# the median step (the first step of each run left out). Then one traced CP 2
# run at T = 8,192: how long each rank computed on a ring block ("ring ... fold")
# against how long it then waited for the block in flight ("ring ... wait").
# Usage: bench/cp_table.sh [rounds]   (env: BRAID, OUT, TS)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="${BRAID:-$root/build/braid}"
rounds="${1:-3}"
out="${OUT:-$root/out/cp_table}"
ts="${TS:-4096 8192}"
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.json
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
grep -m1 "model name" /proc/cpuinfo | sed 's/^model name\s*: /cpu: /'
common=(train --model small --block-size 8192 --batch 1 --steps 4 --val-every 0 --warmup 1)
for r in $(seq 1 "$rounds"); do
  for T in $ts; do
    OMP_NUM_THREADS=2 "$braid" "${common[@]}" --seq-len "$T" --metrics-out "$out/one_T${T}_r$r.jsonl" >/dev/null
    OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 --bind-to none "$braid" "${common[@]}" --seq-len "$T" --cp 2 \
      --metrics-out "$out/cp2_T${T}_r$r.jsonl" >/dev/null
  done
done
OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 --bind-to none "$braid" "${common[@]}" --seq-len 8192 --cp 2 \
  --steps 2 --trace-out "$out/cp2_T8192.trace.json" >/dev/null
/usr/bin/python3 - "$out" "$ts" <<'PY'
import glob, json, statistics, sys
out, ts = sys.argv[1], sys.argv[2].split()
def step_ms(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    rows = [r for r in rows if "ms" in r and r.get("step", 0) >= 1]
    return statistics.median(r["ms"] for r in rows)
print("| T | 1 rank x 2 threads, ms/step | CP 2: 2 ranks x 1 thread, ms/step | CP 2 / one rank |")
print("|---:|---:|---:|---:|")
for T in ts:
    one = statistics.median(step_ms(p) for p in glob.glob(f"{out}/one_T{T}_r*.jsonl"))
    cp = statistics.median(step_ms(p) for p in glob.glob(f"{out}/cp2_T{T}_r*.jsonl"))
    print(f"| {T} | {one:.0f} | {cp:.0f} | {cp / one:.3f} |")
ev = json.load(open(f"{out}/cp2_T8192.trace.json"))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
for pass_ in ("ring forward", "ring backward"):
    fold = sum(e.get("dur", 0) for e in ev if e.get("name", "").startswith(pass_ + " fold"))
    wait = sum(e.get("dur", 0) for e in ev if e.get("name", "").startswith(pass_ + " wait"))
    print(f"{pass_}: compute on blocks {fold / 1e3:.1f} ms, waiting for blocks in flight {wait / 1e3:.1f} ms "
          f"({100 * wait / max(fold + wait, 1):.1f} % of the ring's time), both ranks, 2 steps")
PY
