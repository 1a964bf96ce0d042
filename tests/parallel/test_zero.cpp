// ZeRO-1 parity: sharding the optimizer state changes where the update runs,
// not what it computes. Compared with DDP and the single-rank run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/parallel/data_parallel/grad_buckets.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using testing_harness::synthetic_tokens;

train::TrainOptions opts() {
  auto o = testing_harness::tiny_options(4);
  o.bucket_mb = 1.0;  // several buckets over the 3.3M-element tiny model
  return o;
}

using ZRun = testing_harness::Rank0Run;
const auto run = testing_harness::run_rank0;

void expect_close(const ZRun& a, const ZRun& b, const std::string& what) {
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_NEAR(a.steps[i].loss, b.steps[i].loss, 1e-5 * std::fabs(b.steps[i].loss)) << what << " step " << i;
    EXPECT_NEAR(a.steps[i].grad_norm, b.steps[i].grad_norm, 1e-5 * b.steps[i].grad_norm + 1e-7)
        << what << " step " << i;
  }
}

}  // namespace

TEST(ZeroStage1, OwnershipPartitionsTheBufferAndCollectivesAreExact) {
  // Sizes that do not divide by N, buckets smaller than N (some ranks own
  // nothing of them), and a staged lowest bucket.
  for (int N : {1, 2, 3, 4, 5}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{13}, size_t{1021}}) {
      for (size_t bucket_bytes : {size_t{4}, size_t{12}, size_t{64}, size_t{1} << 20}) {
        std::vector<int> owner(n, -1);
        std::mutex mu;
        comm::run_local(N, [&](comm::Communicator& w) {
          std::vector<float> params(n, -1.f), grads(n);
          const int r = w.rank();
          for (size_t i = 0; i < n; ++i) grads[i] = static_cast<float>((r + 1) * 1000 + i % 97);
          parallel::GradBuckets z(w, params.data(), grads.data(), n, bucket_bytes, true, comm::Algorithm::ring,
                                  parallel::BucketReduce::reduce_scatter);
          z.begin_sync();
          // Report readiness in three decreasing pieces, as backward would.
          z.on_ready(2 * n / 3, n);
          z.on_ready(n / 3, 2 * n / 3);
          z.on_ready(0, n / 3);
          z.finish_sync();
          size_t total = 0;
          for (const auto& s : z.owned()) {
            EXPECT_EQ(s.shard, total);
            total += s.len;
            for (size_t i = s.offset; i < s.offset + s.len; ++i) {
              float sum = 0;  // the exact average: integer sum, one division
              for (int q = 0; q < N; ++q) sum += static_cast<float>((q + 1) * 1000 + i % 97);
              ASSERT_EQ(grads[i], sum / static_cast<float>(N)) << "N=" << N << " n=" << n << " i=" << i;
              params[i] = static_cast<float>(r * 100000 + static_cast<int>(i));
            }
            std::lock_guard<std::mutex> lk(mu);
            for (size_t i = s.offset; i < s.offset + s.len; ++i) {
              EXPECT_EQ(owner[i], -1) << "element " << i << " owned twice";
              owner[i] = r;
            }
          }
          EXPECT_EQ(total, z.shard_size());
          w.barrier();
          z.gather_params();
          w.barrier();
          std::lock_guard<std::mutex> lk(mu);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_NE(owner[i], -1) << "element " << i << " owned by nobody";
            ASSERT_EQ(params[i], static_cast<float>(owner[i] * 100000 + static_cast<int>(i)))
                << "N=" << N << " n=" << n << " bucket " << bucket_bytes << " i=" << i;
          }
        });
      }
    }
  }
}

TEST(ZeroStage1, HalfParametersWithF32GradientsUseEachTheirOwnDtype) {
  // Mixed precision's default: f32 gradients reduce-scattered, bf16 compute
  // parameters all-gathered through the same buckets (staged lowest bucket
  // included). Values are small integers, exact in both dtypes.
  for (int N : {2, 3, 4}) {
    for (size_t n : {size_t{7}, size_t{1021}}) {
      for (size_t bucket_bytes : {size_t{4}, size_t{64}, size_t{1} << 20}) {
        comm::run_local(N, [&](comm::Communicator& w) {
          std::vector<uint16_t> params(n, f32_to_bf16(-1.f));
          std::vector<float> grads(n);
          const int r = w.rank();
          for (size_t i = 0; i < n; ++i) grads[i] = static_cast<float>((r + 1) * 1000 + i % 97);
          parallel::GradBuckets z(w, params.data(), grads.data(), n, bucket_bytes, true, comm::Algorithm::ring,
                                  parallel::BucketReduce::reduce_scatter, {DType::f32, DType::bf16});
          z.begin_sync();
          z.on_ready(0, n);
          z.finish_sync();
          for (const auto& s : z.owned()) {
            for (size_t i = s.offset; i < s.offset + s.len; ++i) {
              float sum = 0;
              for (int q = 0; q < N; ++q) sum += static_cast<float>((q + 1) * 1000 + i % 97);
              ASSERT_EQ(grads[i], sum / static_cast<float>(N)) << "N=" << N << " n=" << n << " i=" << i;
              params[i] = f32_to_bf16(static_cast<float>(r * 16 + static_cast<int>(i % 16)));
            }
          }
          w.barrier();
          z.gather_params();
          // Every element now holds its owner's value: owner * 16 + i % 16 with
          // the owner read off the rank that wrote it (same on every rank).
          std::vector<float> mine(n), all(n);
          for (size_t i = 0; i < n; ++i) mine[i] = bf16_to_f32(params[i]);
          w.all_reduce(mine.data(), all.data(), n, DType::f32, comm::ReduceOp::sum);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(all[i], static_cast<float>(N) * mine[i]) << "ranks disagree at " << i << " N=" << N;
            const float owner = (mine[i] - static_cast<float>(i % 16)) / 16.f;
            ASSERT_TRUE(owner >= 0 && owner < static_cast<float>(N) && owner == std::floor(owner))
                << "element " << i << " holds " << mine[i] << " N=" << N << " bucket " << bucket_bytes;
          }
        });
      }
    }
  }
}

TEST(ZeroStage1, MatchesDdpAndSingleRank) {
  const auto data = synthetic_tokens(20000, 21, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(opts());
  o.bucket_mb = 0.25;  // several buckets over the 0.17M elements
  const ZRun single = run(o, 1, data);
  EXPECT_LT(single.steps.back().loss, single.steps.front().loss - testing_harness::kSmallVocabLossDrop);
  for (int dp : {2, 3, 4}) {
    o.zero = 0;
    const ZRun ddp = run(o, dp, data);
    o.zero = 1;
    const ZRun z = run(o, dp, data);
    expect_close(z, single, "zero1 dp=" + std::to_string(dp) + " vs single");
    expect_close(z, ddp, "zero1 vs ddp dp=" + std::to_string(dp));
    EXPECT_EQ(std::set<uint64_t>(z.hash.begin(), z.hash.end()).size(), 1u) << "dp=" << dp;
  }
  // dp=2: every average is (a+b)/2 in both, so without clipping (whose norm is
  // summed in a different order under sharding) ZeRO-1 equals DDP bitwise.
  o.grad_clip = 0;
  o.steps = 6;
  o.zero = 0;
  const ZRun d2 = run(o, 2, data);
  o.zero = 1;
  const ZRun z2 = run(o, 2, data);
  EXPECT_EQ(z2.hash, d2.hash);
}

TEST(ZeroStage1, CheckpointsResumeAcrossLayouts) {
  const auto data = synthetic_tokens(20000, 23);
  auto o = opts();
  o.steps = 8;
  o.zero = 1;
  const ZRun full = run(o, 3, data);
  const std::string path = testing_harness::tmp_path("braid_zero_ckpt_");
  auto first = o;
  first.save_dir = path;
  first.save_every = 4;
  first.inject_failure_rank = 0;
  first.inject_failure_step = 4;
  EXPECT_THROW(run(first, 3, data), Error);
  // Same layout: bitwise continuation.
  auto again = o;
  again.resume = path;
  const ZRun same = run(again, 3, data);
  ASSERT_EQ(same.steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(same.steps[i].loss, full.steps[4 + i].loss);
  EXPECT_EQ(same.hash, full.hash);
  // Another layout (DDP on 2 ranks) resumes the same checkpoint: same run to rtol.
  auto other = o;
  other.resume = path;
  other.zero = 0;
  const ZRun ddp = run(other, 2, data);
  ZRun tail;
  tail.steps.assign(full.steps.begin() + 4, full.steps.end());
  expect_close(ddp, tail, "resume zero1/dp3 as ddp/dp2");
  std::filesystem::remove_all(path);
}

TEST(ZeroStage1, MovesWhatDdpMoves) {
  // Ring all-reduce sends 2Ψ(N−1)/N elements per rank; ZeRO-1's reduce-scatter
  // plus all-gather sends Ψ(N−1)/N each. Small extras: the loss and norm scalars
  // and the padding of the one bucket whose size N does not divide.
  const auto data = synthetic_tokens(20000, 29);
  auto o = opts();
  o.steps = 2;
  o.check_replicas = false;
  for (int N : {2, 3, 4}) {
    const double psi = [&] {
      model::GPT g(model::GPTConfig::preset("tiny"), 1, 16);
      return static_cast<double>(g.num_params());
    }();
    const double expect = 2.0 * psi * (N - 1) / N * sizeof(float);
    for (int z : {0, 1}) {
      o.zero = z;
      const ZRun r = run(o, N, data);
      for (const auto& s : r.steps) {
        EXPECT_NEAR(static_cast<double>(s.comm_bytes_sent), expect, 0.01 * expect)
            << "N=" << N << " zero=" << z;
      }
    }
  }
}
