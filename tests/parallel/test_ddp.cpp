// DDP parity (docs/ARCHITECTURE.md): with the global batch fixed, every dp degree trains
// the same model as one rank; DP replicas are bitwise equal after every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/data/sampler.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using testing_harness::synthetic_tokens;

train::TrainOptions tiny_opts() { return testing_harness::tiny_options(42); }

using RunResult = testing_harness::Rank0Run;
const auto run_dp = testing_harness::run_rank0;

}  // namespace

TEST(Sampler, UnionOfRankSlicesIsTheSingleRankBatch) {
  const int64_t G = 24;
  data::DistributedSampler single(100000, 32, G, 7, 0, 1);
  for (int dp : {1, 2, 3, 4, 6, 8}) {
    for (int64_t step : {0, 1, 17}) {
      std::vector<size_t> all;
      for (int r = 0; r < dp; ++r) {
        data::DistributedSampler s(100000, 32, G, 7, r, dp);
        auto o = s.rank_offsets(step);
        ASSERT_EQ(static_cast<int64_t>(o.size()), G / dp);
        all.insert(all.end(), o.begin(), o.end());
      }
      EXPECT_EQ(all, single.rank_offsets(step)) << "dp=" << dp << " step=" << step;
    }
  }
  // Different steps draw different batches.
  EXPECT_NE(single.rank_offsets(0), single.rank_offsets(1));
}

TEST(Sampler, RejectsIndivisibleBatchAndShortData) {
  EXPECT_THROW(data::DistributedSampler(1000, 32, 10, 1, 0, 3), ConfigError);
  EXPECT_THROW(data::DistributedSampler(20, 32, 4, 1, 0, 1), ConfigError);
}

TEST(DDP, DataParallelDegreesMatchSingleRank) {
  const auto data = synthetic_tokens(20000, 3, testing_harness::kSmallVocab);
  const auto o = testing_harness::small_vocab(tiny_opts());
  const RunResult ref = run_dp(o, 1, data);
  ASSERT_EQ(ref.steps.size(), 20u);
  // Training must actually move: loss falls and clipping fires at least once.
  EXPECT_LT(ref.steps.back().loss, ref.steps.front().loss - testing_harness::kSmallVocabLossDrop);
  bool clipped = false;
  for (auto& s : ref.steps) clipped |= s.grad_norm > o.grad_clip;
  EXPECT_TRUE(clipped);
  for (int dp : {2, 3, 4}) {
    const RunResult r = run_dp(o, dp, data);
    ASSERT_EQ(r.steps.size(), ref.steps.size());
    for (size_t i = 0; i < r.steps.size(); ++i) {
      EXPECT_NEAR(r.steps[i].loss, ref.steps[i].loss, 1e-5 * std::fabs(ref.steps[i].loss))
          << "dp=" << dp << " step " << i;
      EXPECT_NEAR(r.steps[i].grad_norm, ref.steps[i].grad_norm, 1e-5 * ref.steps[i].grad_norm + 1e-7)
          << "dp=" << dp << " step " << i;
    }
    // check_replicas compared hashes after every step; the final ones too:
    EXPECT_EQ(std::set<uint64_t>(r.hash.begin(), r.hash.end()).size(), 1u) << "dp=" << dp;
  }
}

TEST(DDP, OverlapAndBucketSizeDoNotChangeTheArithmetic) {
  // With dp=2 each averaged element is (a+b)/2 whatever the bucketing, so
  // overlap on/off and any bucket size give bitwise equal runs.
  const auto data = synthetic_tokens(20000, 5, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(tiny_opts());
  o.steps = 6;
  o.bucket_mb = 4.0;
  const RunResult a = run_dp(o, 2, data);
  o.overlap = false;
  const RunResult b = run_dp(o, 2, data);
  o.overlap = true;
  o.bucket_mb = 0.01;  // many small buckets
  const RunResult c = run_dp(o, 2, data);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.hash, c.hash);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss);
    EXPECT_EQ(a.steps[i].loss, c.steps[i].loss);
  }
}

TEST(DDP, ZeroCopyGradientsChangeNoBitOnTwoRanks) {
  // The ranks' threads share memory, so the gradients live in a shared buffer and
  // every bucket is reduced zero-copy; with 2 ranks each element is still (a+b)/2.
  const auto data = synthetic_tokens(20000, 6, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(tiny_opts());
  o.steps = 6;
  o.bucket_mb = 0.01;
  const RunResult shared = run_dp(o, 2, data);
  o.zero_copy = false;
  const RunResult messages = run_dp(o, 2, data);
  const std::string zero_copy_line = "zero-copy through shared memory (2 ranks on one node)";
  EXPECT_EQ(shared.transport, zero_copy_line);  // the buffers really are shared
  EXPECT_EQ(messages.transport, "messages (--no-zero-copy)");
  EXPECT_EQ(shared.hash, messages.hash);
  for (size_t i = 0; i < shared.steps.size(); ++i) EXPECT_EQ(shared.steps[i].loss, messages.steps[i].loss);
  // ZeRO-1 reduces the same shared buffer; ZeRO-3 and FSDP gather parameters into
  // and reduce-scatter gradients from shared unit buffers.
  for (auto [zero, fsdp] : {std::pair{1, false}, std::pair{3, false}, std::pair{3, true}}) {
    o.zero = zero;
    o.fsdp = fsdp;
    o.zero_copy = false;
    const RunResult by_messages = run_dp(o, 2, data);
    o.zero_copy = true;
    const RunResult zero_copy = run_dp(o, 2, data);
    // ZeRO-1 gathers its updated parameters into the model's private buffer.
    EXPECT_EQ(zero_copy.transport, zero_copy_line + (zero == 1 ? "; the parameter all-gather by messages" : ""))
        << "zero " << zero << (fsdp ? " fsdp" : "");
    EXPECT_EQ(by_messages.transport, "messages (--no-zero-copy)") << "zero " << zero << (fsdp ? " fsdp" : "");
    EXPECT_EQ(zero_copy.hash, by_messages.hash) << "zero " << zero << (fsdp ? " fsdp" : "");
    for (size_t i = 0; i < zero_copy.steps.size(); ++i) EXPECT_EQ(zero_copy.steps[i].loss, by_messages.steps[i].loss);
  }
  // HSDP: shard groups of 2 share memory; the 2 replicas average by messages.
  o.zero = 3, o.fsdp = true, o.fsdp_shard_size = 2, o.zero_copy = true, o.steps = 1;
  EXPECT_EQ(run_dp(o, 4, data).transport,
            zero_copy_line + "; gradient shards averaged across the 2 replicas by messages");
}

TEST(DDP, GradientAccumulationMatchesOneBigMicroBatch) {
  const auto data = synthetic_tokens(20000, 9);
  auto o = tiny_opts();
  o.steps = 8;
  o.micro_batch = 12;  // no accumulation
  const RunResult big = run_dp(o, 1, data);
  o.micro_batch = 2;  // 6 micro-batches accumulated on each of... one rank
  const RunResult acc = run_dp(o, 1, data);
  for (size_t i = 0; i < big.steps.size(); ++i) {
    EXPECT_NEAR(acc.steps[i].loss, big.steps[i].loss, 1e-5 * big.steps[i].loss) << "step " << i;
  }
}

TEST(Checkpoint, ResumedRunContinuesTheUninterruptedOneExactly) {
  const auto data = synthetic_tokens(20000, 11);
  auto o = tiny_opts();
  o.steps = 8;
  const RunResult full = run_dp(o, 2, data);
  const std::string path =
      testing_harness::tmp_path("braid_ckpt_test_");
  // First half: a run with steps=8 stopped after 4 steps (save_every) -> emulate by
  // saving at step 4 and resuming with the same schedule.
  auto first = o;
  first.save_dir = path;
  first.save_every = 4;
  first.inject_failure_rank = 1;  // the "crash" after the checkpoint at step 4
  first.inject_failure_step = 4;
  EXPECT_THROW(run_dp(first, 2, data), Error);
  auto second = o;
  second.resume = path;
  const RunResult rest = run_dp(second, 2, data);
  ASSERT_EQ(rest.steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rest.steps[i].step, full.steps[4 + i].step);
    EXPECT_EQ(rest.steps[i].loss, full.steps[4 + i].loss) << "step " << 4 + i;
  }
  EXPECT_EQ(rest.hash, full.hash);
  std::filesystem::remove_all(path);
}

TEST(Trainer, FailingRankStopsTheJobWithItsMessage) {
  const auto data = synthetic_tokens(20000, 13);
  auto o = tiny_opts();
  o.inject_failure_rank = 2;
  o.inject_failure_step = 3;
  try {
    run_dp(o, 3, data);
    FAIL() << "expected the injected failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure on rank 2 at step 3"), std::string::npos)
        << e.what();
  }
}

TEST(Trainer, ConfigErrorsNameTheValuesAndTheFix) {
  auto cfg = model::GPTConfig::preset("tiny");
  auto o = tiny_opts();
  o.global_batch = 10;
  o.micro_batch = 2;
  try {
    train::validate_options(o, 3, cfg);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("global batch 10"), std::string::npos) << m;
    EXPECT_NE(m.find("dp (3)"), std::string::npos) << m;
    EXPECT_NE(m.find("multiple of 6"), std::string::npos) << m;
  }
  o = tiny_opts();
  o.dp = 4;
  EXPECT_THROW(train::validate_options(o, 2, cfg), ConfigError);
  o = tiny_opts();
  o.seq_len = 100000;
  EXPECT_THROW(train::validate_options(o, 1, cfg), ConfigError);
}

TEST(Trainer, BadDataAndCheckpointSettingsFailAtStartUp) {
  const auto data = synthetic_tokens(20000, 17);
  auto o = tiny_opts();
  o.steps = 2;
  o.val_every = 1;
  const std::vector<uint16_t> short_val(16, 5);  // seq_len 16 needs 17
  comm::run_local(1, [&](comm::Communicator& w) {
    EXPECT_THROW(train::Trainer(o, w, data, &short_val), ConfigError);
    const std::vector<uint16_t> bad_val(100, 60000);
    EXPECT_THROW(train::Trainer(o, w, data, &bad_val), ConfigError);
    auto s = o;
    s.save_dir = testing_harness::tmp_path("braid_save_is_a_file_");
    { std::ofstream(s.save_dir) << "not a directory"; }
    EXPECT_THROW(train::Trainer(s, w, data, nullptr), ConfigError);
    std::filesystem::remove(s.save_dir);
  });
  // Resuming with another data order is refused.
  const std::string path = testing_harness::tmp_path("braid_ckpt_mismatch_");
  auto a = tiny_opts();
  a.steps = 2;
  a.save_dir = path;
  run_dp(a, 1, data);
  for (int which = 0; which < 3; ++which) {
    auto b = tiny_opts();
    b.steps = 4;
    b.resume = path;
    if (which == 0) b.seed = 7;
    if (which == 1) b.global_batch = 24;
    if (which == 2) b.steps = 2;  // nothing left to train
    try {
      run_dp(b, 1, data);
      ADD_FAILURE() << "resume variant " << which << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(path);
}
