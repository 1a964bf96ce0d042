#!/usr/bin/env bash
# Builds (running set-up first when needed) and runs the whole test suite:
# unit, kernel (vs PyTorch and finite differences), distributed (ranks as
# threads), MPI (2, 3, 4 processes) and end-to-end CLI tests. Extra arguments
# go to ctest (e.g. -R Pipeline, -L e2e).
#   scripts/test.sh --quick   the inner loop (about 1 minute on 2 cores, the
#                             build not counted): the unit and kernel suites and
#                             one parity run per strand (docs/TESTING.md)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
export OMP_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [ "${1:-}" = "--quick" ]; then
  shift
  # One parity run per strand: DDP, ZeRO / FSDP, TP, TP x DP x ZeRO, PP (every
  # schedule; ZB-V), 3D, CP, the parameter server, recomputation, fp16 loss
  # scaling, and the collectives under MPI.
  parity='DDP.GradientAccumulationMatchesOneBigMicroBatch|Sharded.RanksOwningNothingOfATensor'
  parity+='|ZeroStage1.CheckpointsResumeAcrossLayouts|TensorParallel.MatchesSingleRankWithAnOddVocabulary'
  parity+='|TensorParallel.DataTimesTensorParallelWithZero|Pipeline.EveryScheduleMatchesSingleRank'
  parity+='|PipelineZbV.MatchesSingleRank|Pipeline.ThreeDimensionalLayouts|ContextParallel.Bf16TracksTheSingleRankBf16Run'
  parity+='|ParameterServer.TrafficGrowsWithWorkersAtTheServer|Recompute.BitwiseEqualAndSmallerActivations'
  parity+='|MixedPrecision.Fp16ScaleGrowsAfterCleanSteps|mpi_np2'
  ctest --test-dir build --output-on-failure -j2 -L '^(unit|kernels)$' "$@"
  exec ctest --test-dir build --output-on-failure -j2 -R "^($parity)\$" "$@"
fi
ctest --test-dir build --output-on-failure -j3 "$@"
