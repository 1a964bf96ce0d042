// Context parallelism (--cp, ring attention): each sequence split over CP ranks
// in 2 CP chunks trains the single-rank model, alone and with DP, TP (+ SP),
// PP, ZeRO and FSDP, with dropout (the masks are keyed by global position);
// the CP ranks of a DP rank stay bitwise equal (check_replicas compares the
// DP x CP group after every step); `braid plan` equals the ledger; layouts
// that cannot split are refused naming the values and the fix. HSDP shards
// within groups of the DP x CP ranks.
#include <gtest/gtest.h>

#include <string>

#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using Runs = testing_harness::RankRuns;
using testing_harness::expect_close;
using testing_harness::run;

train::TrainOptions cp_tiny(uint64_t seed) {
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(seed));
  o.seq_len = 32;  // 2 x CP = 8 chunks of 4 at CP = 4
  o.micro_batch = 2;
  o.global_batch = 8;
  o.dropout = 0.1f;
  return o;
}

std::string layout_name(const train::TrainOptions& o) {
  std::string s = "cp=" + std::to_string(o.cp) + " " + o.cp_comm;
  if (o.tp > 1) s += " tp=" + std::to_string(o.tp) + (o.sequence_parallel ? "+sp" : "");
  if (o.pp > 1) s += " pp=" + std::to_string(o.pp);
  if (o.zero) s += " zero=" + std::to_string(o.zero);
  if (o.fsdp) s += o.fsdp_shard_size ? " hsdp=" + std::to_string(o.fsdp_shard_size) : std::string(" fsdp");
  return s;
}

}  // namespace

TEST(ContextParallel, RingMatchesSingleRankWithDropout) {
  const auto o = cp_tiny(31);
  const auto data = testing_harness::synthetic_tokens(40000, 71, testing_harness::kSmallVocab);
  const Runs single = run(o, 1, data);
  auto nodrop = o;
  nodrop.dropout = 0;
  EXPECT_NE(run(nodrop, 1, data).steps[0][0].loss, single.steps[0][0].loss) << "dropout must act";
  for (int cp : {2, 4}) {
    auto c = o;
    c.cp = cp;
    const Runs got = run(c, cp, data);
    expect_close(got.steps[0], single.steps[0], layout_name(c));
    for (int r = 1; r < cp; ++r) EXPECT_EQ(got.hash[size_t(r)], got.hash[0]) << "cp=" << cp << " rank " << r;
  }
}

TEST(ContextParallel, ComposesWithDataTensorAndPipelineParallel) {
  const auto o = cp_tiny(32);
  const auto data = testing_harness::synthetic_tokens(40000, 73, testing_harness::kSmallVocab);
  const Runs single = run(o, 1, data);
  struct Layout {
    int tp, pp, zero;
    bool sp, fsdp;
    int shard = 0;  // HSDP: shard groups of this many DP x CP ranks
  };
  for (const Layout l : {Layout{1, 1, 0, false, false}, Layout{2, 1, 0, false, false}, Layout{2, 1, 0, true, false},
                         Layout{1, 2, 0, false, false}, Layout{1, 1, 1, false, false}, Layout{1, 1, 3, false, false},
                         Layout{1, 1, 0, false, true}, Layout{1, 1, 0, false, true, 2}}) {
    auto c = o;
    c.cp = 2, c.tp = l.tp, c.pp = l.pp, c.zero = l.zero, c.sequence_parallel = l.sp, c.fsdp = l.fsdp;
    c.fsdp_shard_size = l.shard;
    const int ranks = 4;  // CP 2 x (DP 2, TP 2 or PP 2)
    expect_close(run(c, ranks, data).steps[0], single.steps[0], layout_name(c));
  }
}

// All-to-all (Ulysses): a head split of whole sequences, alone and with DP and
// TP (+ SP); tiny's 4 heads divide over CP x TP = 4.
TEST(ContextParallel, AllToAllMatchesSingleRank) {
  auto o = cp_tiny(36);
  const auto data = testing_harness::synthetic_tokens(40000, 81, testing_harness::kSmallVocab);
  const Runs single = run(o, 1, data);
  struct Layout {
    int cp, tp, ranks;
    bool sp;
  };
  for (const Layout l : {Layout{2, 1, 2, false}, Layout{4, 1, 4, false}, Layout{2, 1, 4, false},
                         Layout{2, 2, 4, false}, Layout{2, 2, 4, true}}) {
    auto c = o;
    c.cp = l.cp, c.tp = l.tp, c.sequence_parallel = l.sp, c.cp_comm = "a2a";
    expect_close(run(c, l.ranks, data).steps[0], single.steps[0], layout_name(c) + " on " + std::to_string(l.ranks));
  }
  auto c = o;
  c.cp = 4, c.tp = 2, c.cp_comm = "a2a";
  const std::string e = testing_harness::config_error(c, 8, data);
  EXPECT_NE(e.find("--n-head that CP x TP = 8 divides"), std::string::npos) << e;
}

// CP 4 with TP 2, PP 2 and DP 2 on 8 ranks, ring and a2a (8 heads: a2a
// needs CP x TP = 8 to divide them).
TEST(ContextParallel, FourWaysComposeOnEightRanks) {
  auto o = cp_tiny(37);
  o.n_head = 8;  // 8 features per head
  const auto data = testing_harness::synthetic_tokens(40000, 83, testing_harness::kSmallVocab);
  const Runs single = run(o, 1, data);
  struct Layout {
    int tp, pp;
    const char* comm;
  };
  for (const Layout l : {Layout{2, 1, "ring"}, Layout{2, 1, "a2a"}, Layout{1, 2, "ring"}, Layout{1, 1, "a2a"}}) {
    auto c = o;
    c.cp = 4, c.tp = l.tp, c.pp = l.pp, c.cp_comm = l.comm;
    expect_close(run(c, 8, data).steps[0], single.steps[0], layout_name(c) + " on 8");
  }
}

TEST(ContextParallel, Bf16TracksTheSingleRankBf16Run) {
  auto o = cp_tiny(33);
  o.precision = "bf16";
  o.steps = 8;
  const auto data = testing_harness::synthetic_tokens(40000, 75, testing_harness::kSmallVocab);
  const Runs single = run(o, 1, data);
  auto c = o;
  c.cp = 2;
  // bf16 probabilities are rounded against a running maximum the ring's block
  // order changes (tests/parallel/test_ring_attention.cpp): the parity rule's
  // bf16 tolerance.
  expect_close(run(c, 2, data).steps[0], single.steps[0], "cp=2 bf16", 1e-2);
}

TEST(ContextParallel, PlanEqualsTheLedger) {
  auto o = cp_tiny(34);
  o.steps = 2;
  o.cp = 2;
  o.tp = 2;
  const auto data = testing_harness::synthetic_tokens(40000, 77, testing_harness::kSmallVocab);
  run(o, 4, data, [&](train::Trainer& t, int rank) {
    testing_harness::expect_plan_is_ledger(o, 4, rank, t, "cp=2 tp=2");
  });
}

TEST(ContextParallel, RefusesWhatCannotSplit) {
  const auto data = testing_harness::synthetic_tokens(40000, 79, testing_harness::kSmallVocab);
  auto o = cp_tiny(35);
  o.cp = 3;
  o.seq_len = 32;  // 2 x 3 = 6 does not divide 32
  std::string e = testing_harness::config_error(o, 3, data);
  EXPECT_NE(e.find("does not split into 2 x CP = 6"), std::string::npos) << e;
  EXPECT_NE(e.find("--seq-len"), std::string::npos) << e;
  o = cp_tiny(35);
  o.cp = 2;
  o.dp_mode = "ps";
  e = testing_harness::config_error(o, 3, data);
  EXPECT_NE(e.find("parameter server"), std::string::npos) << e;
  o = cp_tiny(35);
  o.cp = 3;
  o.seq_len = 48;
  e = testing_harness::config_error(o, 4, data);
  EXPECT_NE(e.find("--cp 3"), std::string::npos) << e;
}
