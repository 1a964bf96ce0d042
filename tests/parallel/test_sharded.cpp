// ZeRO-2/3, FSDP and HSDP parity: sharding gradients and parameters changes
// where state lives and when it moves, not what the step computes. Compared
// with DDP and the single-rank run, plus layout, memory and traffic checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/parallel/data_parallel/sharded.h"
#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

using testing_harness::synthetic_tokens;
using Runs = testing_harness::RankRuns;
using testing_harness::run;

struct Mode {
  const char* name;
  int zero;
  bool fsdp;
  int shard_size;
};

train::TrainOptions with(train::TrainOptions o, const Mode& m) {
  o.zero = m.zero;
  o.fsdp = m.fsdp;
  o.fsdp_shard_size = m.shard_size;
  return o;
}

using testing_harness::expect_close;

// Each mode on `ranks` ranks trains the reference run; ranks end bitwise equal.
void expect_modes_match(const train::TrainOptions& o, int ranks, std::initializer_list<Mode> modes,
                        const std::vector<train::StepRecord>& ref, const std::vector<uint16_t>& data,
                        const std::string& label) {
  for (const Mode& m : modes) {
    const Runs got = run(with(o, m), ranks, data);
    expect_close(got.steps[0], ref, std::string(m.name) + " " + label);
    EXPECT_EQ(std::set<uint64_t>(got.hash.begin(), got.hash.end()).size(), 1u) << m.name;
  }
}

bool clipping_fired(const std::vector<train::StepRecord>& s, float clip) {
  for (const auto& r : s)
    if (r.grad_norm > clip) return true;
  return false;
}

}  // namespace

TEST(Sharded, LayoutPartitionsEveryUnitForAnyWorldSize) {
  // A model small enough that its LayerNorm and bias tensors (16-element
  // groups with the alignment gap) do not divide by most N.
  model::GPTConfig cfg = model::GPTConfig::preset("tiny");
  cfg.name = "micro";
  cfg.n_embd = 8, cfg.n_head = 2, cfg.n_layer = 1, cfg.block_size = 8, cfg.vocab_size = 60;
  cfg.padded_vocab_size = 64;
  const size_t n = model::unit_bounds(cfg).back();
  for (bool fsdp : {false, true}) {
    for (int stage : {2, 3}) {
      for (int N = 1; N <= 8; ++N) {
        parallel::ShardedConfig sc;
        sc.stage = stage;
        sc.fsdp = fsdp;
        std::vector<int> owner(n, -1);
        size_t shard_elems = 0;
        bool someone_owns_nothing_of_a_group = false;
        for (int r = 0; r < N; ++r) {
          const auto p = parallel::ShardedEngine::plan(cfg, sc, N, r);
          if (r == 0) shard_elems = p.shard_elems;
          EXPECT_EQ(p.shard_elems, shard_elems) << "shards have one size on every rank";
          EXPECT_EQ(p.state_elems, p.shard_elems);
          size_t owned = 0;
          for (const auto& s : p.owned) {
            ASSERT_LE(s.shard + s.len, p.shard_elems);
            for (size_t i = s.offset; i < s.offset + s.len; ++i) {
              ASSERT_LT(i, n);
              EXPECT_EQ(owner[i], -1) << "element " << i << " owned twice (N=" << N << ")";
              owner[i] = r;
            }
            owned += s.len;
          }
          if (owned < p.shard_elems) someone_owns_nothing_of_a_group = true;
        }
        for (size_t i = 0; i < n; ++i) ASSERT_NE(owner[i], -1) << "element " << i << " unowned, N=" << N;
        // N = 7: a 16-element group gives c = 3, so rank 6 owns none of it.
        if (N == 7 && !fsdp) {
          EXPECT_TRUE(someone_owns_nothing_of_a_group) << "N=" << N;
        }
      }
    }
  }
}

TEST(Sharded, Stage2Stage3FsdpMatchDdpAndSingleRank) {
  const auto data = synthetic_tokens(20000, 31, testing_harness::kSmallVocab);
  const auto o = testing_harness::small_vocab(testing_harness::tiny_options(6));
  const Runs single = run(o, 1, data);
  EXPECT_TRUE(clipping_fired(single.steps[0], o.grad_clip));
  EXPECT_LT(single.steps[0].back().loss, single.steps[0].front().loss - testing_harness::kSmallVocabLossDrop);
  const Mode modes[] = {{"zero2", 2, false, 0}, {"zero3", 3, false, 0}, {"fsdp", 0, true, 0}};
  for (int dp : {2, 3, 4}) {
    const Runs ddp = run(o, dp, data);
    for (const Mode& m : modes) {
      // check_replicas (in tiny_options) compares every rank's gathered
      // parameters bitwise after every step and throws on a difference.
      const Runs got = run(with(o, m), dp, data);
      const std::string what = std::string(m.name) + " dp=" + std::to_string(dp);
      expect_close(got.steps[0], single.steps[0], what + " vs single");
      expect_close(got.steps[0], ddp.steps[0], what + " vs ddp");
      EXPECT_EQ(std::set<uint64_t>(got.hash.begin(), got.hash.end()).size(), 1u) << what;
      for (int r = 1; r < dp; ++r) {
        for (size_t i = 0; i < got.steps[0].size(); ++i) {
          EXPECT_EQ(got.steps[static_cast<size_t>(r)][i].grad_norm, got.steps[0][i].grad_norm)
              << what << ": the clipping norm must be identical on every rank";
        }
      }
    }
  }
}

TEST(Sharded, GradientAccumulationAndHybridSharding) {
  const auto data = synthetic_tokens(20000, 37, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(7));
  o.steps = 10;
  o.global_batch = 16;
  o.micro_batch = 2;  // 2 micro-batches per rank at dp = 4
  const Runs single = run(o, 1, data);
  expect_modes_match(o, 4,
                     {Mode{"zero2", 2, false, 0}, Mode{"zero3", 3, false, 0}, Mode{"fsdp", 0, true, 0},
                      Mode{"hsdp 2x2", 0, true, 2}, Mode{"hsdp 4x1", 0, true, 1}},
                     single.steps[0], data, "accum vs single");
}

TEST(Sharded, RanksOwningNothingOfATensor) {
  // N = 9 on tiny: a 64-element LayerNorm tensor gives c = 8, so rank 8 owns
  // none of it (and a gathered unit carries zero padding of whole slices).
  const auto data = synthetic_tokens(20000, 39, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(5));
  o.steps = 5;
  o.global_batch = 9;
  const Runs single = run(o, 1, data);
  expect_modes_match(o, 9, {Mode{"zero3", 3, false, 0}, Mode{"fsdp", 0, true, 0}, Mode{"hsdp 3x3", 0, true, 3}},
                     single.steps[0], data, "dp=9 vs single");
}

TEST(Sharded, CheckpointsResumeAcrossLayouts) {
  const auto data = synthetic_tokens(20000, 41, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(8));
  o.steps = 8;
  o.zero = 3;
  const Runs full = run(o, 3, data);
  const std::string path = testing_harness::tmp_path("braid_sharded_ckpt_");
  auto first = o;
  first.steps = 4;
  first.save_dir = path;
  run(first, 3, data);
  auto again = o;
  again.resume = path;
  const Runs same = run(again, 3, data);  // same layout: bitwise continuation
  ASSERT_EQ(same.steps[0].size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(same.steps[0][i].loss, full.steps[0][4 + i].loss);
  EXPECT_EQ(same.hash, full.hash);
  auto other = o;  // FSDP on 2 ranks resumes a ZeRO-3 checkpoint of 3 ranks
  other.resume = path;
  other.zero = 0;
  other.fsdp = true;
  const Runs fsdp = run(other, 2, data);
  std::vector<train::StepRecord> tail(full.steps[0].begin() + 4, full.steps[0].end());
  expect_close(fsdp.steps[0], tail, "resume zero3/dp3 as fsdp/dp2");
  std::filesystem::remove_all(path);
}

TEST(Sharded, PlanEqualsLedger) {
  const auto data = synthetic_tokens(20000, 43, testing_harness::kSmallVocab);
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(9));
  o.steps = 1;
  o.check_replicas = false;
  for (const char* prec : {"fp32", "bf16"}) {
    for (const Mode& m : {Mode{"zero1", 1, false, 0}, Mode{"zero2", 2, false, 0},
                          Mode{"zero3", 3, false, 0}, Mode{"fsdp", 0, true, 0},
                          Mode{"hsdp", 0, true, 2}}) {
      for (int N : {1, 2, 4}) {
        if (m.shard_size > N) continue;
        auto oo = with(o, m);
        oo.precision = prec;
        std::vector<std::array<size_t, kNumMemCategories>> got(static_cast<size_t>(N));
        std::mutex mu;
        comm::run_local(N, [&](comm::Communicator& w) {
          train::Trainer t(oo, w, data, nullptr);
          t.run();
          std::lock_guard<std::mutex> lk(mu);
          for (size_t c = 0; c < kNumMemCategories; ++c)
            got[static_cast<size_t>(w.rank())][c] = t.ledger().peak(static_cast<MemCategory>(c));
        });
        for (int r = 0; r < N; ++r) {
          const auto p = parallel::plan_memory(oo, N, r);
          for (size_t c = 0; c < kNumMemCategories; ++c) {
            EXPECT_EQ(p.bytes[c], got[static_cast<size_t>(r)][c])
                << m.name << " " << prec << " N=" << N << " rank " << r << " "
                << mem_category_name(static_cast<MemCategory>(c));
          }
        }
      }
    }
  }
}

TEST(Sharded, TrafficMatchesTheFormulas) {
  // Per rank per step with one micro-batch (b bytes per element, S_u the
  // per-rank block of unit u, ring collectives sending (N-1) blocks):
  //   stage 2: reduce-scatter sum_u S_u + all-gather sum_u S_u  (= DDP's 2 Psi (N-1)/N)
  //   stage 3: reduce-scatter sum_u S_u + forward all-gather sum_u S_u
  //            + backward all-gather of blocks 1..L-1 (the embedding, the
  //            last block and ln_f stay gathered from forward into backward).
  // Extras: the loss all-reduce and the norm's all-gather (a few bytes).
  const auto data = synthetic_tokens(20000, 47);
  auto o = testing_harness::tiny_options(10);
  o.steps = 3;
  o.check_replicas = false;
  const auto cfg = model::GPTConfig::preset("tiny");
  const int L = static_cast<int>(cfg.n_layer);
  for (int N : {2, 3, 4}) {
    for (const Mode& m : {Mode{"zero2", 2, false, 0}, Mode{"zero3", 3, false, 0}, Mode{"fsdp", 0, true, 0}}) {
      parallel::ShardedConfig sc;
      sc.stage = m.fsdp ? 3 : m.zero;
      sc.fsdp = m.fsdp;
      const auto p = parallel::ShardedEngine::plan(cfg, sc, N, 0);
      uint64_t expect = 0;
      for (size_t u = 0; u < p.unit_gather_bytes.size(); ++u) expect += p.unit_gather_bytes[u] + p.unit_scatter_bytes[u];
      if (sc.stage == 3)
        for (int u = 2; u <= L; ++u) expect += p.unit_gather_bytes[static_cast<size_t>(u) - 1];
      o.micro_batch = o.global_batch / N;  // one micro-batch per rank and step
      const Runs got = run(with(o, m), N, data);
      const Runs ddp = run(o, N, data);
      for (size_t i = 1; i < got.steps[0].size(); ++i) {
        const uint64_t sent = got.steps[0][i].comm_bytes_sent;
        EXPECT_GE(sent, expect) << m.name << " N=" << N;
        EXPECT_LE(sent, expect + 256) << m.name << " N=" << N << ": only scalars on top";
        const double ratio = static_cast<double>(sent) / static_cast<double>(ddp.steps[0][i].comm_bytes_sent);
        if (sc.stage == 2) {
          EXPECT_NEAR(ratio, 1.0, 0.01) << "stage 2 moves what DDP moves, N=" << N;
        } else {
          EXPECT_GT(ratio, 1.0) << m.name << " N=" << N;
          EXPECT_LT(ratio, 1.5) << m.name << " N=" << N;
        }
      }
    }
  }
}

TEST(Sharded, HalfPrecisionTrafficFollowsTheReduceDtype) {
  // bf16 compute copies travel in bf16 (all-gathers); gradients travel in the
  // reduce dtype: f32 by default, bf16 when opted in, which halves the
  // gradient traffic. DDP moves only gradients, so its traffic halves exactly
  // (up to the scalars on top).
  const auto data = synthetic_tokens(20000, 49);
  auto o = testing_harness::tiny_options(10);
  o.steps = 2;
  o.check_replicas = false;
  o.precision = "bf16";
  const auto cfg = model::GPTConfig::preset("tiny");
  const int L = static_cast<int>(cfg.n_layer), N = 2;
  o.micro_batch = o.global_batch / N;
  for (const char* reduce : {"fp32", "bf16"}) {
    o.reduce_dtype = reduce;
    for (const Mode& m : {Mode{"zero2", 2, false, 0}, Mode{"fsdp", 0, true, 0}}) {
      parallel::ShardedConfig sc;
      sc.stage = m.fsdp ? 3 : m.zero;
      sc.fsdp = m.fsdp;
      sc.compute = DType::bf16;
      sc.reduce = std::string(reduce) == "bf16" ? DType::bf16 : DType::f32;
      const auto p = parallel::ShardedEngine::plan(cfg, sc, N, 0);
      uint64_t expect = 0;
      for (size_t u = 0; u < p.unit_gather_bytes.size(); ++u) expect += p.unit_gather_bytes[u] + p.unit_scatter_bytes[u];
      if (sc.stage == 3)
        for (int u = 2; u <= L; ++u) expect += p.unit_gather_bytes[static_cast<size_t>(u) - 1];
      const uint64_t sent = run(with(o, m), N, data).steps[0][1].comm_bytes_sent;
      EXPECT_GE(sent, expect) << m.name << " reduce " << reduce;
      EXPECT_LE(sent, expect + 256) << m.name << " reduce " << reduce << ": only scalars on top";
    }
  }
  o.reduce_dtype = "fp32";
  const uint64_t f32 = run(o, N, data).steps[0][1].comm_bytes_sent;
  o.reduce_dtype = "bf16";
  const uint64_t half = run(o, N, data).steps[0][1].comm_bytes_sent;
  EXPECT_NEAR(static_cast<double>(f32) / static_cast<double>(half), 2.0, 0.01) << f32 << " vs " << half;
}

TEST(Sharded, ConfigErrorsNameTheFix) {
  const auto data = synthetic_tokens(2000, 1);
  auto expect_config_error = [&](const train::TrainOptions& o, int N, const std::string& needle) {
    const std::string msg = testing_harness::config_error(o, N, data);
    EXPECT_NE(msg.find(needle), std::string::npos) << "got: " << msg;
  };
  auto o = testing_harness::tiny_options(1);
  auto bad = o;
  bad.zero = 4;
  expect_config_error(bad, 1, "2 (+ gradients) or 3 (+ parameters)");
  bad = o;
  bad.fsdp = true;
  bad.zero = 2;
  expect_config_error(bad, 2, "use --zero 3");
  bad = o;
  bad.fsdp = true;
  bad.fsdp_shard_size = 3;
  expect_config_error(bad, 4, "use a divisor of 4");
  bad = o;
  bad.fsdp_shard_size = 2;
  expect_config_error(bad, 2, "needs --fsdp");
  bad = o;
  bad.precision = "fp8";
  expect_config_error(bad, 1, "use fp32, bf16 or fp16");
  bad = o;
  bad.precision = "fp16";
  bad.loss_scale.backoff_factor = 2;
  expect_config_error(bad, 1, "backoff");
}
