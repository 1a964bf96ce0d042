// ZB-V trains the single-rank run: P = 2 and 4 (rank 0 holds the embedding
// and the head, so the tied embedding needs no group and its two gradient
// contributions add on one rank), with TP x sequence parallelism and dropout,
// and braid plan equal to every rank's ledger.
#include <gtest/gtest.h>

#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

std::vector<uint16_t> zbv_tokens(size_t n, uint64_t seed) {
  auto t = testing_harness::synthetic_tokens(n, seed);
  for (auto& x : t) x = static_cast<uint16_t>(x % 1001);
  return t;
}

train::TrainOptions zbv_options(uint64_t seed) {
  auto o = testing_harness::tiny_options(seed);
  o.n_layer = 8;  // P = 4 x 2 chunks: a layer per virtual stage
  o.vocab_size = 1001;
  o.micro_batch = 1;
  o.steps = 6;
  return o;
}

}  // namespace

TEST(PipelineZbV, MatchesSingleRank) {
  const auto data = zbv_tokens(20000, 83);
  for (int P : {2, 4}) {
    for (int m : {1, P, 2 * P + 1}) {
      auto o = zbv_options(33);
      o.global_batch = m;
      const auto single = testing_harness::run(o, 1, data);
      auto t = o;
      t.pp = P;
      t.schedule = "zb-v";  // --virtual-stages left at 1: the schedule's 2
      const auto got = testing_harness::run(t, P, data, [&](train::Trainer& tr, int r) {
        testing_harness::expect_plan_is_ledger(t, P, r, tr, "zb-v");
      });
      const std::string what = "zb-v P=" + std::to_string(P) + " m=" + std::to_string(m);
      // First step: the same forward arithmetic (bitwise); later steps differ by
      // the order of the tied embedding's gradient sums (rtol 1e-5).
      EXPECT_EQ(got.steps[0][0].loss, single.steps[0][0].loss) << what;
      testing_harness::expect_close(got.steps[0], single.steps[0], what);
      for (int r = 1; r < P; ++r)
        for (size_t i = 0; i < got.steps[0].size(); ++i)
          EXPECT_EQ(got.steps[static_cast<size_t>(r)][i].loss, got.steps[0][i].loss) << what;
    }
  }
}

TEST(PipelineZbV, WithTensorParallelAndDropout) {
  const auto data = zbv_tokens(20000, 93);
  auto o = zbv_options(39);
  o.n_layer = 4;
  o.global_batch = 6;
  o.steps = 4;
  o.dropout = 0.1f;
  o.tp = 2;
  o.sequence_parallel = true;
  const auto single = testing_harness::run(o, 2, data);  // TP 2 alone
  auto t = o;
  t.pp = 2;
  t.schedule = "zb-v";
  t.virtual_stages = 2;
  const auto got = testing_harness::run(t, 4, data, [&](train::Trainer& tr, int r) {
    testing_harness::expect_plan_is_ledger(t, 4, r, tr, "zb-v tp2+sp");
  });
  testing_harness::expect_close(got.steps[0], single.steps[0], "zb-v tp2+sp pp2 dropout");
}

TEST(PipelineZbV, RefusesRecomputeAndOtherChunkCounts) {
  const auto data = zbv_tokens(2000, 1);
  auto o = zbv_options(35);
  o.n_layer = 4;
  o.pp = 2;
  o.schedule = "zb-v";
  o.recompute = "full";
  EXPECT_NE(testing_harness::config_error(o, 2, data).find("--recompute none"), std::string::npos);
  o.recompute = "none";
  o.virtual_stages = 3;
  EXPECT_NE(testing_harness::config_error(o, 2, data).find("--virtual-stages 2"), std::string::npos);
}
