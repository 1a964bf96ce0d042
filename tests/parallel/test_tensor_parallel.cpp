// Tensor parallelism (Megatron column/row-parallel layers, vocab-parallel
// embedding and loss), sequence parallelism, dropout and DP x TP: each layout
// trains the single-rank run. The trainer's check_replicas compares DP replicas
// and the TP-replicated tensors (LayerNorms, wpe, row-parallel biases) bitwise
// after every step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "braid/core/error.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/train/checkpoint_dir.h"
#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using Runs = testing_harness::RankRuns;
using testing_harness::run;

// An odd vocabulary (1001, padded to 1024) so padding lands inside the last TP
// rank's vocabulary slice.
std::vector<uint16_t> tokens(size_t n, uint64_t seed, int64_t V) {
  auto t = testing_harness::synthetic_tokens(n, seed);
  for (auto& x : t) x = static_cast<uint16_t>(x % V);
  return t;
}

train::TrainOptions odd_tiny(uint64_t seed) {
  auto o = testing_harness::tiny_options(seed);
  o.vocab_size = 1001;
  o.micro_batch = 2;
  o.global_batch = 8;
  return o;
}

using testing_harness::expect_close;

using testing_harness::tmp_path;

}  // namespace

TEST(TensorParallel, MatchesSingleRankWithAnOddVocabulary) {
  auto o = odd_tiny(21);
  const auto data = tokens(20000, 61, o.vocab_size);
  const Runs single = run(o, 1, data);
  bool clipped = false;
  for (const auto& r : single.steps[0]) clipped |= r.grad_norm > o.grad_clip;
  EXPECT_TRUE(clipped) << "clipping must fire";
  EXPECT_LT(single.steps[0].back().loss, single.steps[0].front().loss - 0.05f);
  for (int tp : {2, 4}) {
    for (bool sp : {false, true}) {
      auto t = o;
      t.tp = tp;
      t.sequence_parallel = sp;
      const Runs got = run(t, tp, data);
      const std::string what = "tp=" + std::to_string(tp) + (sp ? " sp" : "");
      expect_close(got.steps[0], single.steps[0], what);
      for (int r = 1; r < tp; ++r) {
        for (size_t i = 0; i < got.steps[0].size(); ++i) {
          EXPECT_EQ(got.steps[static_cast<size_t>(r)][i].loss, got.steps[0][i].loss) << what;
          EXPECT_EQ(got.steps[static_cast<size_t>(r)][i].grad_norm, got.steps[0][i].grad_norm) << what;
        }
      }
    }
  }
}

TEST(TensorParallel, ThreeWaySplitOfSixHeads) {
  auto o = odd_tiny(22);
  o.n_head = 6;
  o.n_embd = 48;       // 8 per head
  o.vocab_size = 1100;  // padded to 1152 = 3 x 384
  const auto data = tokens(20000, 63, o.vocab_size);
  const Runs single = run(o, 1, data);
  auto t = o;
  t.tp = 3;
  expect_close(run(t, 3, data).steps[0], single.steps[0], "tp=3");
  t.sequence_parallel = true;
  t.micro_batch = 3;  // 3 x 16 token rows split over 3 ranks
  t.global_batch = 9;
  auto s = o;
  s.micro_batch = 3;
  s.global_batch = 9;
  expect_close(run(t, 3, data).steps[0], run(s, 1, data).steps[0], "tp=3 sp");
}

TEST(TensorParallel, DropoutMasksAreTheSingleRankMasks) {
  auto o = odd_tiny(23);
  o.dropout = 0.1f;
  o.steps = 10;
  const auto data = tokens(20000, 65, o.vocab_size);
  const Runs single = run(o, 1, data);
  auto nodrop = o;
  nodrop.dropout = 0;
  EXPECT_NE(run(nodrop, 1, data).steps[0][0].loss, single.steps[0][0].loss) << "dropout must act";
  for (bool sp : {false, true}) {
    auto t = o;
    t.tp = 2;
    t.sequence_parallel = sp;
    expect_close(run(t, 2, data).steps[0], single.steps[0], std::string("dropout tp=2") + (sp ? " sp" : ""));
  }
  auto d = o;  // data parallel: masks keyed by the global token row
  expect_close(run(d, 2, data).steps[0], single.steps[0], "dropout dp=2");
}

TEST(TensorParallel, DataTimesTensorParallelWithZero) {
  auto o = odd_tiny(24);
  const auto data = tokens(20000, 67, o.vocab_size);
  const Runs single = run(o, 1, data);
  for (int zero : {0, 1, 2}) {
    for (bool sp : {false, true}) {
      auto t = o;
      t.tp = 2;
      t.zero = zero;
      t.sequence_parallel = sp;
      const Runs got = run(t, 4, data);
      const std::string what = "dp=2 x tp=2 zero" + std::to_string(zero) + (sp ? " sp" : "");
      expect_close(got.steps[0], single.steps[0], what);
      // DP replicas (ranks 0/2 and 1/3) end bitwise equal; the TP ranks hold different shards.
      EXPECT_EQ(got.hash[0], got.hash[2]) << what;
      EXPECT_EQ(got.hash[1], got.hash[3]) << what;
      EXPECT_NE(got.hash[0], got.hash[1]) << what;
    }
  }
}

// Parameters sharded over DP on top of TP (ZeRO-3, FSDP, HSDP): each TP rank's
// local tensors are gathered unit by unit from its DP group; the run is the
// single-rank one.
TEST(TensorParallel, ShardedParametersOverDataParallelRanks) {
  auto o = odd_tiny(27);
  o.steps = 8;
  const auto data = tokens(20000, 69, o.vocab_size);
  const Runs single = run(o, 1, data);
  struct Layout {
    const char* name;
    int ranks, zero;
    bool fsdp;
    int shard;
  };
  for (const Layout& l : {Layout{"zero3", 4, 3, false, 0}, Layout{"fsdp", 4, 0, true, 0},
                          Layout{"hsdp", 8, 0, true, 2}}) {
    for (bool sp : {false, true}) {
      auto t = o;
      t.tp = 2;
      t.zero = l.zero;
      t.fsdp = l.fsdp;
      t.fsdp_shard_size = l.shard;
      t.sequence_parallel = sp;
      const Runs got = run(t, l.ranks, data);
      const std::string what = std::string("tp=2 ") + l.name + (sp ? " sp" : "");
      expect_close(got.steps[0], single.steps[0], what);
      // DP replicas of a TP rank end bitwise equal (the hash covers each unit as gathered).
      for (int r = 2; r < l.ranks; ++r) EXPECT_EQ(got.hash[static_cast<size_t>(r)], got.hash[static_cast<size_t>(r % 2)]) << what;
    }
  }
}

TEST(TensorParallel, GatheredParametersEqualTheSingleRankOnesAndResume) {
  // The checkpoint assembles whole tensors from the TP shards. After k steps
  // they match the single-rank parameters to within float rounding of the
  // AdamW updates: |diff| <= 1e-5 + 1e-4 |p| (the partial sums of a split
  // matmul round differently, and AdamW's normalised step can turn a 1e-7
  // gradient difference into a visible one where v is tiny).
  auto o = odd_tiny(25);
  o.steps = 10;
  const auto data = tokens(20000, 69, o.vocab_size);
  const size_t n = model::unit_bounds(parallel::model_config(o), 1).back();
  // Checkpoint after k of 10 steps, then stop (an injected failure at step k).
  auto params_after = [&](train::TrainOptions t, int ranks, const std::string& path, int k) {
    std::filesystem::remove_all(path);  // a fresh run needs an empty --save directory
    t.save_dir = path;
    t.save_every = k;
    t.inject_failure_rank = 0;
    t.inject_failure_step = k;
    EXPECT_THROW(run(t, ranks, data), Error);
    auto p = formats::read_checkpoint_weights(train::checkpoint_path(path, k, true)).params;  // sharded
    EXPECT_EQ(p.size(), n);
    return p;
  };
  const std::string ps = tmp_path("braid_tp_single_"), pt = tmp_path("braid_tp_two_");
  auto t = o;
  t.tp = 2;
  t.sequence_parallel = true;
  // After every step from 1 to 6 (the k = 6 checkpoints are resumed below).
  for (int k = 1; k <= 6; ++k) {
    const auto single = params_after(o, 1, ps, k);
    const auto tp2 = params_after(t, 2, pt, k);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::fabs(tp2[i] - single[i]) > 1e-5f + 1e-4f * std::fabs(single[i])) ++bad;
    EXPECT_EQ(bad, 0u) << "elements outside the tolerance after step " << k;
  }
  // Resume the TP=2 checkpoint on one rank and the single-rank one on TP=4:
  // both continue the same run.
  auto longer = o;
  const Runs full = run(longer, 1, data);
  std::vector<train::StepRecord> tail(full.steps[0].begin() + 6, full.steps[0].end());
  auto r1 = longer;
  r1.resume = pt;
  expect_close(run(r1, 1, data).steps[0], tail, "tp=2 checkpoint resumed on 1 rank", 1e-4);
  auto r4 = longer;
  r4.resume = ps;
  r4.tp = 4;
  expect_close(run(r4, 4, data).steps[0], tail, "single checkpoint resumed on tp=4");
  std::filesystem::remove_all(ps);
  std::filesystem::remove_all(pt);
}

TEST(TensorParallel, ConfigErrorsNameTheFix) {
  auto o = odd_tiny(26);
  const auto data = tokens(2000, 1, o.vocab_size);
  auto message = [&](const train::TrainOptions& t, int N) { return testing_harness::config_error(t, N, data); };
  auto t = o;
  t.tp = 3;  // tiny has 4 heads
  EXPECT_NE(message(t, 3).find("does not divide n_head=4"), std::string::npos) << message(t, 3);
  EXPECT_NE(message(t, 3).find("use 1, 2, 4"), std::string::npos);
  t = o;
  t.tp = 2;
  EXPECT_NE(message(t, 3).find("does not divide the 3 ranks"), std::string::npos) << message(t, 3);
  t = o;
  t.sequence_parallel = true;
  EXPECT_NE(message(t, 1).find("needs --tp > 1"), std::string::npos);
  t = o;
  t.tp = 2;
  t.sequence_parallel = true;
  t.micro_batch = 1;
  t.seq_len = 15;
  EXPECT_NE(message(t, 2).find("divides by 2"), std::string::npos) << message(t, 2);
}

TEST(TensorParallel, PlanEqualsLedger) {
  auto o = odd_tiny(27);
  o.steps = 1;
  o.check_replicas = false;
  const auto data = tokens(20000, 71, o.vocab_size);
  struct L {
    int tp, ranks, zero;
    bool sp;
    float dropout;
  };
  for (const L& l : {L{2, 2, 0, false, 0.f}, L{2, 2, 0, true, 0.1f}, L{4, 4, 0, true, 0.f},
                     L{2, 4, 1, true, 0.f}, L{2, 4, 2, false, 0.1f}, L{2, 4, 3, true, 0.f},
                     L{2, 4, 3, false, 0.1f}}) {
    auto t = o;
    t.tp = l.tp;
    t.zero = l.zero;
    t.sequence_parallel = l.sp;
    t.dropout = l.dropout;
    std::vector<std::array<size_t, kNumMemCategories>> got(static_cast<size_t>(l.ranks));
    std::mutex mu;
    comm::run_local(l.ranks, [&](comm::Communicator& w) {
      train::Trainer tr(t, w, data, nullptr);
      tr.run();
      std::lock_guard<std::mutex> lk(mu);
      for (size_t c = 0; c < kNumMemCategories; ++c)
        got[static_cast<size_t>(w.rank())][c] = tr.ledger().peak(static_cast<MemCategory>(c));
    });
    for (int r = 0; r < l.ranks; ++r) {
      const auto p = parallel::plan_memory(t, l.ranks, r);
      for (size_t c = 0; c < kNumMemCategories; ++c)
        EXPECT_EQ(p.bytes[c], got[static_cast<size_t>(r)][c])
            << "tp=" << l.tp << " ranks=" << l.ranks << " rank " << r << " "
            << mem_category_name(static_cast<MemCategory>(c));
    }
  }
}

TEST(TensorParallel, SamplingMatchesSingleRank) {
  // Under TP the vocabulary's logits are sliced over the ranks; sampling
  // gathers the row, so every layout draws the single-rank continuation.
  auto o = odd_tiny(28);
  o.steps = 3;
  o.sample_top_k = 5;
  const auto data = tokens(20000, 73, o.vocab_size);
  auto sample = [&](train::TrainOptions t, int ranks) {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(ranks));
    run(t, ranks, data, [&](train::Trainer& tr, int r) { out[static_cast<size_t>(r)] = tr.sample({5, 17, 300}, 12, 99); });
    return out;
  };
  const auto ref = sample(o, 1)[0];
  for (bool sp : {false, true}) {
    auto t = o;
    t.tp = 2;
    t.sequence_parallel = sp;
    for (const auto& s : sample(t, 2)) EXPECT_EQ(s, ref) << (sp ? "tp=2 sp" : "tp=2");
  }
}
