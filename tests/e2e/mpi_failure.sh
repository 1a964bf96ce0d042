#!/usr/bin/env bash
# An injected failure on one MPI rank must take the whole job down (non-zero exit),
# never hang, and the output must name the failing rank and the reason.
# Usage: mpi_failure.sh <braid binary> [source dir]
set -u
BRAID=${1:?usage: mpi_failure.sh <braid binary>}
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

start=$(date +%s)
timeout 60 mpirun --oversubscribe -np 3 "$BRAID" bench-comm --inject-failure-rank 1 \
  --ops all_reduce --min-bytes 4096 --max-bytes 1048576 --iters 3 --warmup 1 >"$LOG" 2>&1
rc=$?
end=$(date +%s)
echo "--- output (exit $rc after $((end - start)) s) ---"
cat "$LOG"
echo "---"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 124 ] || fail "the job hung (killed by timeout 60)"
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 failed"
grep -q "injected failure on rank 1" "$LOG" || fail "output does not name rank 1 and the reason"
grep -q "braid: error:" "$LOG" || fail "main() did not report the error"
echo "PASS: job exited $rc, failing rank and reason reported"
