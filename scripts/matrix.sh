#!/usr/bin/env bash
# The composability matrix (tests/parallel/test_matrix.cpp): trains every one
# of its cells, {DDP, ZeRO-1/2/3, FSDP, HSDP} x {TP 1, 2, 2 + SP} x
# {PP none, and each schedule the registry puts in the matrix: 1F1B,
# interleaved, ZB-H1, ...} x {fp32, bf16, fp16} x {recompute none, full} x
# {CP 1, CP 2 ring, CP 2 all-to-all}, against the single-rank run, checks braid
# plan against every rank's ledger, and prints how many cells train the same
# model and how many are refused and why. CI trains a pairwise cover of the
# cells; this runs them all (3,240 cells). Builds build/ first when needed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x build/tests/test_parallel ] || bash scripts/setup.sh
export OMP_NUM_THREADS=1
exec build/tests/test_parallel --gtest_also_run_disabled_tests \
  --gtest_filter='Matrix.DISABLED_EveryCellTrains:Matrix/MatrixPlan.PlanEqualsTheLedgerOnEveryCell/*' "$@"
