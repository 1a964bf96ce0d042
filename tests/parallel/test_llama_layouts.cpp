// Llama-family blocks (RMSNorm, rotary positions, SwiGLU, grouped-query
// attention, no biases, an untied head) in the strands: every layout trains
// the single-rank run (the parity rule, rtol 1e-5 in fp32), with the
// trainer's replica checks comparing DP replicas and the TP-replicated norms
// bitwise after every step, and braid plan equal to each rank's ledger. The
// layouts a Llama block cannot take yet are refused with their reason.
// Pipelines hold the untied head (lm_head) on the last stage, beside the
// final norm, and keep no tied-embedding group; context parallelism passes
// only the key/value heads round the ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/data/token_view.h"
#include "braid/parallel/plan_memory.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using testing_harness::expect_close;
using testing_harness::run;

// llama-tiny (4 query heads over 2 key/value heads) on the small vocabulary,
// two sequences per micro-batch.
train::TrainOptions llama_tiny(uint64_t seed) {
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(seed));
  o.model = "llama-tiny";
  o.micro_batch = 2;
  o.global_batch = 8;
  return o;
}

std::vector<uint16_t> llama_data() { return testing_harness::synthetic_tokens(20000, 63, testing_harness::kSmallVocab); }

// Trains o on `ranks` and checks it against `single` and plan = ledger on every rank.
void expect_llama_layout(const train::TrainOptions& o, int ranks, const std::vector<train::StepRecord>& single,
                   const std::vector<uint16_t>& d, const std::string& what) {
  std::mutex mu;
  const auto got = run(o, ranks, d, [&](train::Trainer& t, int r) {
    std::lock_guard<std::mutex> lk(mu);
    testing_harness::expect_plan_is_ledger(o, ranks, r, t, what);
  });
  expect_close(got.steps[0], single, what);
}

}  // namespace

TEST(LlamaLayouts, TensorSequenceAndDataParallelTrainTheSingleRankRun) {
  const auto o = llama_tiny(71);
  const auto d = llama_data();
  const auto single = run(o, 1, d).steps[0];
  EXPECT_LT(single.back().loss, single.front().loss - testing_harness::kSmallVocabLossDrop) << "the run must train";
  struct Layout {
    const char* name;
    int ranks, tp, zero, pp;
    bool sp, fsdp;
    const char* recompute;
    const char* schedule;
  };
  const Layout layouts[] = {
      {"tp2 (one kv head per rank)", 2, 2, 0, 1, false, false, "none", "1f1b"},
      {"tp2 + sp, recompute selective", 2, 2, 0, 1, true, false, "selective", "1f1b"},
      {"dp2 zero3 x tp2, recompute full", 4, 2, 3, 1, false, false, "full", "1f1b"},
      {"dp2 fsdp", 2, 1, 0, 1, false, true, "none", "1f1b"},
      // The untied head on the last stage: no tied-embedding group.
      {"pp2 1f1b", 2, 1, 0, 2, false, false, "none", "1f1b"},
      {"pp2 zb-h1 x dp2 zero1", 4, 1, 1, 2, false, false, "none", "zb-h1"},
      {"pp2 gpipe x tp2 + sp, fsdp", 4, 2, 0, 2, true, true, "selective", "gpipe"},
  };
  for (const auto& l : layouts) {
    auto x = o;
    x.tp = l.tp, x.zero = l.zero, x.sequence_parallel = l.sp, x.fsdp = l.fsdp, x.recompute = l.recompute;
    x.pp = l.pp, x.schedule = l.schedule;
    expect_llama_layout(x, l.ranks, single, d, l.name);
  }
}

TEST(LlamaLayouts, ContextParallelTrainsTheSingleRankRun) {
  // Rotary positions turn each token by its global position, so a CP chunk
  // rotates as one rank does; the ring passes only the key/value heads, the
  // all-to-all splits query and key/value heads over CP alike. The shape of
  // the GPT-2 context-parallel tests (test_context_parallel.cpp): 32 tokens,
  // dropout on (masks keyed by global position too).
  auto o = llama_tiny(72);
  o.seq_len = 32;
  o.dropout = 0.1f;
  const auto d = llama_data();
  for (int64_t kv : {2, 4}) {  // grouped (2 query heads per key/value head), and plain multi-head
    auto m = o;
    m.n_kv_head = kv;
    const auto single = run(m, 1, d).steps[0];
    for (const char* comm : {"ring", "a2a"}) {
      auto x = m;
      x.cp = 2, x.cp_comm = comm;
      expect_llama_layout(x, 2, single, d, std::string("cp2 ") + comm + " n_kv_head " + std::to_string(kv));
    }
    auto x = m;
    x.cp = 2, x.tp = 2, x.sequence_parallel = true;
    expect_llama_layout(x, 4, single, d, "cp2 ring x tp2 + sp, n_kv_head " + std::to_string(kv));
  }
}

TEST(LlamaLayouts, HalfPrecisionTrainsTheSingleRankRunInItsPrecision) {
  // bf16 against one bf16 rank: the tolerance of test_mixed_precision.cpp's
  // bf16 layouts (each gradient element rounds once more per reduction order).
  auto o = llama_tiny(73);
  o.precision = "bf16";
  const auto d = llama_data();
  const auto single = run(o, 1, d).steps[0];
  auto x = o;
  x.tp = 2, x.zero = 1;
  const auto got = run(x, 4, d).steps[0];
  ASSERT_EQ(got.size(), single.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].loss, single[i].loss, 1e-3 * single[i].loss) << "step " << i;
    EXPECT_NEAR(got[i].grad_norm, single[i].grad_norm, 1e-2 * single[i].grad_norm) << "step " << i;
  }
}

TEST(LlamaLayouts, LayoutsThatCannotSplitTheHeadsAreRefusedWithTheirReason) {
  const auto d = llama_data();
  auto tp4 = llama_tiny(74);
  tp4.tp = 4;  // 2 key/value heads over 4 TP ranks: no replication of kv heads
  EXPECT_NE(testing_harness::config_error(tp4, 4, d).find("does not divide n_kv_head=2"), std::string::npos);
  auto a2a = llama_tiny(74);
  a2a.tp = 2, a2a.cp = 2, a2a.cp_comm = "a2a";  // one key/value head per TP rank: none to split over CP
  EXPECT_NE(testing_harness::config_error(a2a, 4, d).find("key/value heads of each TP rank"), std::string::npos);
  EXPECT_THROW(parallel::plan_memory(a2a, 4, 0), ConfigError);
}

// Token ids past uint16 (a version-3 token file's, Llama 3's 128,256-token
// vocabulary) train: TP 2 splits that vocabulary's embedding and head and
// trains the one-rank run on ids that use every part of it.
TEST(LlamaLayouts, WideTokenIdsTrainALlama3SizedVocabulary) {
  auto o = llama_tiny(75);
  o.vocab_size = 128256;
  o.steps = 5;  // the head of 128,256 rows dominates: a few steps show the parity
  std::vector<uint32_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint32_t((i * 7 + (i / 13) * 31) % 997 * 128 + i % 128) % 128256u;
  EXPECT_GT(*std::max_element(ids.begin(), ids.end()), 65535u);
  auto run_wide = [&](const train::TrainOptions& x, int ranks) {
    std::vector<train::StepRecord> rank0;
    std::mutex mu;
    comm::run_local(ranks, [&](comm::Communicator& w) {
      train::Trainer t(x, w, data::TokenView(ids), data::TokenView());
      auto recs = t.run();
      std::lock_guard<std::mutex> lk(mu);
      if (w.rank() == 0) rank0 = std::move(recs);
    });
    return rank0;
  };
  const auto single = run_wide(o, 1);
  EXPECT_LT(single.back().loss, single.front().loss) << "the run must train";
  auto x = o;
  x.tp = 2;
  expect_close(run_wide(x, 2), single, "tp2 over a 128,256-token vocabulary");
}

// GPT-2's block is unchanged by the model family: `small`'s first 20 losses
// on this test's data, recorded on an AMD EPYC (AVX-512) by the binary whose
// `braid train --model small` losses and gradient norms are bitwise those of
// the binary before the family existed, pinned within 1e-6 relative, as
// another CPU's matmul kernels may sum in another order.
TEST(Gpt2Block, SmallTrainsAsBeforeTheModelFamily) {
  train::TrainOptions o = testing_harness::tiny_options(5);
  o.model = "small";
  o.global_batch = 4;
  o.seq_len = 32;
  o.lr = 1e-3f;  // a run that stays stable, so summation-order differences stay at rounding's size
  o.check_replicas = false;
  const auto steps = run(o, 1, testing_harness::synthetic_tokens(20000, 17)).steps[0];
  const double before[20] = {10.862292289733887, 10.833877563476562, 10.811925888061523, 10.708273887634277, 10.639961242675781, 10.573757171630859, 10.659584045410156, 10.357809066772461, 10.387776374816895, 10.027816772460938,
                              10.200141906738281, 9.9174165725708008, 9.8802089691162109, 9.7287073135375977, 9.57354736328125, 10.106745719909668, 9.4557094573974609, 9.9845905303955078, 9.5456333160400391, 8.8971948623657227};
  ASSERT_EQ(steps.size(), 20u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_NEAR(steps[i].loss, before[i], 1e-6 * before[i]) << "step " << i;
}
