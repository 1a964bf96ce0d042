# Read by ctest after the discovered gtest lists (TEST_INCLUDE_FILES): the
# expected seconds (COST) of the longest gtest cases, measured on the 2-core
# machine, so a run without ctest's own timing history (a fresh clone, as in
# CI) starts them first and the short ones fill the cores at the end, instead
# of a long case starting last. ctest's history replaces these after one run.
# docs/TESTING.md lists the slowest tests and what each guards.
# The matrix plan check, one case per data-parallel mode (gtest names it by
# mode and parameter index).
set(braid_dp_modes ddp zero1 zero2 zero3 fsdp hsdp)
foreach(param RANGE 5)
  list(GET braid_dp_modes ${param} dp)
  set_tests_properties("Matrix/MatrixPlan.PlanEqualsTheLedgerOnEveryCell/${dp}  # GetParam() = ${param}"
                       PROPERTIES COST 25)
endforeach()
set(braid_gtest_costs
  Sharded.Stage2Stage3FsdpMatchDdpAndSingleRank 85
  MixedPrecision.HalfPrecisionTracksFp32 58
  MixedPrecision.Bf16MatmulsInBf16OrOnRoundedValuesInF32 40
  ContextParallel.ComposesWithDataTensorAndPipelineParallel 38
  MemoryPlan.EqualsTheLedgerForEveryCategoryAndRank 37
  ZeroStage1.MatchesDdpAndSingleRank 31
  MixedPrecision.InfOnOneRankSkipsTheStepEverywhere 30
  ContextParallel.FourWaysComposeOnEightRanks 25
  CheckpointLayouts.ResumingInAnotherLayoutContinuesAsTheFileDoes 22
  ContextParallel.AllToAllMatchesSingleRank 21
  CheckpointLayouts.ShardedPiecesHoldTheFilesStateBitForBitAndBalanced 20
  Sharded.GradientAccumulationAndHybridSharding 18
  Sharded.PlanEqualsLedger 15
  DDP.ZeroCopyGradientsChangeNoBitOnTwoRanks 15
  MixedPrecision.PipelineTracksOneRankAndSkipsOverflowsEverywhere 15
  DDP.DataParallelDegreesMatchSingleRank 14
  Matrix.PairwiseCellsTrainTheSingleRankRun 13
  MixedPrecision.Fp32GradientsMakeDataParallelMatchOneRankToF32Roundoff 13
  GPTReference.TinyMatchesPyTorchOnTheFusedAttentionPath 13)
list(LENGTH braid_gtest_costs n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET braid_gtest_costs ${i} t)
  list(GET braid_gtest_costs ${j} c)
  set_tests_properties("${t}" PROPERTIES COST ${c})
endforeach()
