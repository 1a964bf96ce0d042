# Read by ctest after the discovered gtest lists (TEST_INCLUDE_FILES): the
# expected seconds (COST) of the longest gtest cases, measured on the 2-core
# machine, so a run without ctest's own timing history (a fresh clone, as in
# CI) starts them first and the short ones fill the cores at the end, instead
# of a long case starting last. ctest's history replaces these after one run.
# docs/TESTING.md lists the slowest tests and what each guards.
# The long ones that run many ranks as threads keep both cores busy: they take
# two of ctest's three slots (scripts/test.sh runs -j3), so each runs beside
# one other test (a single-threaded one, or a script waiting on a launch or a
# deadline), never beside another of them.
# The matrix plan check, one case per data-parallel mode (gtest names it by
# mode and parameter index).
set(braid_dp_modes ddp zero1 zero2 zero3 fsdp hsdp)
foreach(param RANGE 5)
  list(GET braid_dp_modes ${param} dp)
  set_tests_properties("Matrix/MatrixPlan.PlanEqualsTheLedgerOnEveryCell/${dp}  # GetParam() = ${param}"
                       PROPERTIES COST 45 PROCESSORS 2)
endforeach()
# Name, seconds, slots.
set(braid_gtest_costs
  MixedPrecision.HalfPrecisionTracksFp32 58 2
  MixedPrecision.Bf16MatmulsInBf16OrOnRoundedValuesInF32 33 2
  MemoryPlan.EqualsTheLedgerForEveryCategoryAndRank 27 2
  GPTReference.TinyMatchesPyTorchOnTheFusedAttentionPath 15 1
  Sharded.Stage2Stage3FsdpMatchDdpAndSingleRank 10 2
  MixedPrecision.PipelineTracksOneRankAndSkipsOverflowsEverywhere 9 2
  MixedPrecision.ShardedBf16ReduceEqualsSingleRankBf16 9 2
  Gemm.HalfOperandsLargerThanOneTileMatchNaive 9 1
  FlashAttention.GroupedQueryHeadsShareTheirKeyValueHead 8 1
  CostModel.ThisMachineIsMeasuredAndWritesAClusterFile 8 1
  Sharded.TrafficMatchesTheFormulas 8 2
  MixedPrecision.Fp32GradientsMakeDataParallelMatchOneRankToF32Roundoff 7 2
  ParameterServer.SynchronousIsDdp 6 2
  GPTReference.TinyMatchesPyTorch 6 1
  GPTReference.LlamaTinyMatchesPyTorch 6 1
  GPTReference.LlamaVariantsMatchPyTorch 6 1
  LlamaLayouts.TensorSequenceAndDataParallelTrainTheSingleRankRun 5 2
  ParameterServer.AsynchronousKeepsItsStalenessBoundAndLearns 6 2)
list(LENGTH braid_gtest_costs n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 3)
  math(EXPR j "${i} + 1")
  math(EXPR k "${i} + 2")
  list(GET braid_gtest_costs ${i} t)
  list(GET braid_gtest_costs ${j} c)
  list(GET braid_gtest_costs ${k} p)
  set_tests_properties("${t}" PROPERTIES COST ${c} PROCESSORS ${p})
endforeach()
