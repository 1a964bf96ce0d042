// `braid plan`: the predicted per-rank peak memory by category equals what the
// Trainer's MemoryLedger records, for every category and every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/train/memory_check.h"
#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"

using namespace braid;

namespace {

std::vector<uint16_t> tokens(size_t n, uint64_t seed) {
  std::vector<uint16_t> t(n);
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(rng.below(50257));
  return t;
}

struct Case {
  std::string model;
  int64_t micro_batch, seq_len, accum;
  double bucket_mb;
};

std::string describe(const Case& c, int N, int zero) {
  return c.model + " N=" + std::to_string(N) + " zero=" + std::to_string(zero) +
         " B=" + std::to_string(c.micro_batch) + " T=" + std::to_string(c.seq_len) +
         " accum=" + std::to_string(c.accum) + " bucket_mb=" + std::to_string(c.bucket_mb);
}

// Builds the Trainer on N local ranks, runs one step and compares each rank's
// ledger peaks with plan_memory for that rank.
void check(const Case& c, int N, int zero, const std::vector<uint16_t>& data,
           const std::string& dp_mode = "ddp") {
  train::TrainOptions o;
  o.model = c.model;
  o.steps = 1;
  o.val_every = 0;
  o.verbose = false;
  o.micro_batch = c.micro_batch;
  o.seq_len = c.seq_len;
  o.dp_mode = dp_mode;
  o.global_batch = (dp_mode == "ps" ? N - 1 : N) * c.micro_batch * c.accum;
  o.zero = zero;
  o.bucket_mb = c.bucket_mb;
  o.warmup_steps = 0;
  std::vector<parallel::MemoryPlan> plans;
  for (int r = 0; r < N; ++r) plans.push_back(parallel::plan_memory(o, N, r));
  std::mutex mu;
  comm::run_local(N, [&](comm::Communicator& w) {
    train::Trainer t(o, w, data, nullptr);
    t.run();
    const MemoryLedger& led = t.ledger();
    const parallel::MemoryPlan& p = plans[static_cast<size_t>(w.rank())];
    std::lock_guard<std::mutex> lk(mu);
    for (size_t i = 0; i < kNumMemCategories; ++i) {
      const auto cat = static_cast<MemCategory>(i);
      EXPECT_EQ(led.peak(cat), p.at(cat))
          << describe(c, N, zero) << " rank " << w.rank() << " category " << mem_category_name(cat);
    }
    EXPECT_EQ(led.peak_total(), p.total()) << describe(c, N, zero) << " rank " << w.rank();
    EXPECT_EQ(t.model().num_params(), p.num_params);
  });
}

}  // namespace

TEST(MemoryPlan, EqualsTheLedgerForEveryCategoryAndRank) {
  const auto data = tokens(20000, 3);
  const std::vector<Case> cases = {
      {"tiny", 1, 16, 1, 4.0},  {"tiny", 2, 8, 2, 0.25},  {"tiny", 1, 64, 1, 1.0},
      {"small", 1, 16, 1, 4.0}, {"small", 2, 8, 1, 0.5},
  };
  for (const auto& c : cases)
    for (int N : {1, 2, 3, 4})
      for (int zero : {0, 1}) check(c, N, zero, data);
  // Parameter server: the server holds the moments and a gradient receive buffer.
  for (int N : {2, 3}) check(cases[0], N, 0, data, "ps");
}

TEST(MemoryPlan, ZeroShardsAndStagingFollowTheBuckets) {
  train::TrainOptions o;
  o.model = "tiny";
  o.micro_batch = 1;
  o.seq_len = 16;
  o.zero = 1;
  o.bucket_mb = 1.0;
  for (int N : {1, 2, 3, 4, 5}) {
    o.global_batch = N;
    size_t shards = 0;
    for (int r = 0; r < N; ++r) {
      const auto p = parallel::plan_memory(o, N, r);
      shards += p.optimizer_elems;
      EXPECT_EQ(p.at(MemCategory::optimizer), 2 * p.optimizer_elems * sizeof(float));
      if (N == 1) {
        EXPECT_EQ(p.at(MemCategory::comm), 0u);
      }
    }
    // The shards partition the flat buffer.
    EXPECT_EQ(shards, parallel::plan_memory(o, N, 0).num_params) << "N=" << N;
  }
  o.zero = 0;
  o.global_batch = 2;
  const auto ddp = parallel::plan_memory(o, 2, 1);
  EXPECT_EQ(ddp.at(MemCategory::optimizer), 2 * ddp.num_params * sizeof(float));
  EXPECT_EQ(ddp.at(MemCategory::comm), 0u);
  EXPECT_EQ(ddp.model_state_bytes(), 16 * ddp.num_params);  // 16 Psi exactly without ZeRO
}

TEST(MemoryPlan, Gpt2IsPlannedWithoutAllocating) {
  train::TrainOptions o;
  o.model = "gpt2";
  o.micro_batch = 8;
  o.seq_len = 1024;
  o.global_batch = 16;
  o.zero = 1;
  const size_t rss0 = process_peak_rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = parallel::plan_memory(o, 2, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 124.4M parameters: wte 50304 x 768, wpe 1024 x 768, 12 blocks of
  // 12 C^2 + 13 C, ln_f 2 C (C = 768 is a multiple of 16: no alignment gaps).
  const size_t C = 768;
  const size_t psi = 50304 * C + 1024 * C + 12 * (12 * C * C + 13 * C) + 2 * C;
  EXPECT_EQ(p.num_params, psi);
  EXPECT_EQ(p.at(MemCategory::compute_params), 4 * psi);
  EXPECT_EQ(p.at(MemCategory::grads), 4 * psi);
  EXPECT_GT(p.total(), size_t{10} << 30);  // ~16 GiB, mostly activations at B=8, T=1024
  EXPECT_LT(s, 1.0);
  EXPECT_LT(process_peak_rss_bytes() - rss0, size_t{64} << 20) << "plan_memory allocated";
}

TEST(MemoryPlan, InvalidOptionsThrowLikeTheTrainer) {
  train::TrainOptions o;
  o.model = "tiny";
  o.global_batch = 6;
  o.micro_batch = 4;
  EXPECT_THROW(parallel::plan_memory(o, 2, 0), ConfigError);  // 6 % (2 x 4) != 0
  o.global_batch = 8;
  o.seq_len = 65;
  EXPECT_THROW(parallel::plan_memory(o, 2, 0), ConfigError);  // > block_size 64
  o.seq_len = 16;
  EXPECT_THROW(parallel::plan_memory(o, 2, 2), ConfigError);  // rank outside the job
  EXPECT_NO_THROW(parallel::plan_memory(o, 2, 1));
}

// --block-size sets the context length: a published model's sequence of 2,048
// (Narayanan et al. 2021) is planned as it was run, wpe growing with it.
TEST(MemoryPlan, BlockSizeOverridesTheContextLength) {
  train::TrainOptions o;
  o.model = "gpt2";
  o.global_batch = 2;
  o.micro_batch = 1;
  o.seq_len = 2048;
  try {
    parallel::plan_memory(o, 1, 0);
    ADD_FAILURE() << "--seq-len 2048 fits gpt2's 1024 positions";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--block-size 2048"), std::string::npos) << e.what();
  }
  o.block_size = 2048;
  o.vocab_size = 51200;
  const auto p = parallel::plan_memory(o, 1, 0);
  EXPECT_EQ(p.config.block_size, 2048);
  EXPECT_EQ(p.config.name, "gpt2 with vocab_size=51200, block_size=2048");
  const size_t C = 768;
  EXPECT_EQ(p.num_params, 51200 * C + 2048 * C + 12 * (12 * C * C + 13 * C) + 2 * C);
}

// A model given by its sizes is named by them, or by its preset and what
// changed, never by a bare preset name it no longer matches.
TEST(MemoryPlan, ModelNamedByWhatChanged) {
  train::TrainOptions o;
  o.model = "small";
  EXPECT_EQ(parallel::model_config(o).name, "small");
  o.n_layer = 4;  // the preset's own value: nothing changed
  EXPECT_EQ(parallel::model_config(o).name, "small");
  o.n_layer = 8;
  EXPECT_EQ(parallel::model_config(o).name, "small with n_layer=8");
  o.block_size = 512;
  EXPECT_EQ(parallel::model_config(o).name, "small with n_layer=8, block_size=512");
  o = train::TrainOptions{};
  o.model = "small";
  o.n_layer = 105, o.n_head = 128, o.n_embd = 20480;  // MT-NLG 530B (Smith et al. 2022)
  EXPECT_EQ(parallel::model_config(o).name, "L=105 H=128 C=20480");
  o.block_size = 2048;
  EXPECT_EQ(parallel::model_config(o).name, "L=105 H=128 C=20480 with block_size=2048");
}

// The sharding degree N of the ZeRO formula is the DP degree, which the
// pipeline divides too: 8 ranks as TP 2 x PP 2 leave DP 2.
TEST(ParallelPlan, ShardingDegreeCountsEveryStrand) {
  train::TrainOptions o;
  o.model = "small";
  o.tp = 2;
  o.pp = 2;
  o.zero = 1;
  o.global_batch = 4;
  o.micro_batch = 1;
  std::vector<parallel::MemoryPlan> plans;
  for (int r = 0; r < 8; ++r) plans.push_back(parallel::plan_memory(o, 8, r));
  const parallel::ParallelPlan& pl = plans[0].parallel;
  EXPECT_EQ(pl.dp.degree, 2);
  EXPECT_EQ(pl.dp.shard_degree, 2);
  EXPECT_EQ(pl.pp.micro_batches, 2);
  const std::string text = parallel::format_zero_formulas(plans);
  EXPECT_NE(text.find("N = 2 sharding ranks"), std::string::npos) << text;
  // Every rank's model states are its own formula plus at most the shard padding.
  for (const auto& p : plans) {
    const double want = parallel::zero_formula(pl, p.num_params, 2).bytes;
    EXPECT_NEAR(static_cast<double>(p.model_state_bytes()), want, 0.001 * want) << "rank " << p.rank;
  }
  o.fsdp = true;
  o.zero = 0;
  o.tp = o.pp = 1;
  o.fsdp_shard_size = 2;
  o.global_batch = 8;
  const auto h = parallel::plan_memory(o, 8, 5);
  EXPECT_STREQ(h.parallel.dp.mode->name, "hsdp");
  EXPECT_EQ(h.parallel.dp.shard_degree, 2);
}

// The layout's description says where a half-precision run keeps its
// activations: in the compute dtype where oneDNN multiplies it, else in f32.
TEST(ParallelPlan, DescriptionNamesWhereActivationsAreStored) {
  train::TrainOptions o;
  o.model = "tiny";
  o.global_batch = 8;
  o.micro_batch = 8;
  EXPECT_EQ(parallel::plan_memory(o, 1, 0).parallel.describe().find("activations"), std::string::npos);
  o.precision = "bf16";
  EXPECT_NE(parallel::plan_memory(o, 1, 0).parallel.describe().find("activations stored in bf16"), std::string::npos);
  o.precision = "fp16";
  EXPECT_NE(parallel::plan_memory(o, 1, 0).parallel.describe().find("activations stored in f16"), std::string::npos);
  o.matmul_precision = "fp32";
  EXPECT_NE(parallel::plan_memory(o, 1, 0).parallel.describe().find("activations stored in f32"), std::string::npos);
  o.fp32_residual = true;
  EXPECT_NE(parallel::plan_memory(o, 1, 0).parallel.describe().find("residual stream in f32"), std::string::npos);
}

// --micro-batch auto (the default): the largest up to 8 that divides batch / dp;
// with P stages the largest that still gives every stage P micro-batches.
TEST(ParallelPlan, MicroBatchAutoPicksTheLargestThatDividesTheLayout) {
  train::TrainOptions o;
  o.model = "tiny";
  o.global_batch = 16;
  o.micro_batch = parallel::kMicroBatchAuto;
  EXPECT_EQ(parallel::plan_memory(o, 2, 0).parallel.micro_batch, 8);
  o.pp = 2;
  EXPECT_EQ(parallel::plan_memory(o, 4, 0).parallel.micro_batch, 4);  // dp 2: 8 per rank, >= 2 micro-batches
  o.global_batch = 12;
  o.n_layer = 4;
  o.pp = 4;
  EXPECT_EQ(parallel::plan_memory(o, 4, 0).parallel.micro_batch, 3);  // dp 1: 12 per rank, >= 4 micro-batches
  o.global_batch = 64;
  o.pp = 1;
  EXPECT_EQ(parallel::plan_memory(o, 2, 0).parallel.micro_batch, 8);  // 32 per rank: capped at 8, 4 micro-batches
  o.global_batch = 24;
  EXPECT_EQ(parallel::plan_memory(o, 4, 0).parallel.micro_batch, 6);  // the default: auto
  EXPECT_EQ(parallel::plan_memory(o, 3, 0).parallel.micro_batch, 8);
  o.global_batch = 6;
  EXPECT_THROW(parallel::plan_memory(o, 4, 0), ConfigError);  // 6 does not split over 4 DP ranks
}

// Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N_d = 64, K = 12 with
// half-precision gradients gives 120, 31.4, 16.6 and 1.9 GB per device for the
// baseline and stages 1-3. braid's default fp32 gradients add 2Ψ unsharded
// (stages 0, 1) or 2Ψ/N (stages 2, 3).
TEST(ParallelPlan, ZeroFormulaReproducesThePapersFigure1) {
  const size_t psi = 7'500'000'000;
  parallel::ParallelPlan pl;
  pl.compute = DType::bf16;
  struct Row {
    int stage;
    double half_gb, f32_gb;
  };
  for (const Row& r : {Row{0, 120.0, 135.0}, Row{1, 31.40625, 46.40625}, Row{2, 16.640625, 16.875},
                       Row{3, 1.875, 2.109375}}) {
    pl.dp.zero_stage = r.stage;
    pl.reduce = DType::bf16;
    EXPECT_DOUBLE_EQ(parallel::zero_formula(pl, psi, 64).bytes / 1e9, r.half_gb) << "stage " << r.stage;
    pl.reduce = DType::f32;
    EXPECT_DOUBLE_EQ(parallel::zero_formula(pl, psi, 64).bytes / 1e9, r.f32_gb) << "stage " << r.stage;
  }
}

// ParallelContext builds the groups the plan describes: sizes and every
// rank's coordinates agree, on every layout of 8 ranks.
TEST(ParallelPlan, ContextGroupsMatchThePlan) {
  struct Layout {
    int tp, pp, hsdp;
  };
  for (const Layout& l : std::vector<Layout>{{1, 1, 0}, {2, 1, 0}, {1, 2, 0}, {2, 2, 0}, {2, 4, 0}, {1, 1, 2}, {1, 1, 4}}) {
    train::TrainOptions o;
    o.model = "small";
    o.tp = l.tp;
    o.pp = l.pp;
    o.fsdp = l.hsdp > 0;
    o.fsdp_shard_size = l.hsdp;
    o.global_batch = 8;
    o.micro_batch = 1;
    const auto cfg = parallel::model_config(o);
    const parallel::ParallelPlan plan = parallel::resolve_plan(o, 8, cfg);
    std::mutex mu;
    comm::run_local(8, [&](comm::Communicator& w) {
      parallel::ParallelContext ctx(plan, w);
      std::lock_guard<std::mutex> lk(mu);
      const std::string what = plan.describe() + " rank " + std::to_string(w.rank());
      EXPECT_EQ(ctx.dp().size(), plan.dp.degree) << what;
      EXPECT_EQ(ctx.dp_rank(), plan.dp_rank(w.rank())) << what;
      EXPECT_EQ(ctx.tp_rank(), plan.tp_rank(w.rank())) << what;
      EXPECT_EQ(ctx.pp_rank(), plan.pp_rank(w.rank())) << what;
      EXPECT_EQ(ctx.tp() ? ctx.tp()->size() : 1, plan.tp.degree) << what;
      EXPECT_EQ(ctx.pp() ? ctx.pp()->size() : 1, plan.pp.stages) << what;
      EXPECT_EQ(ctx.shard().size(), plan.dp.shard_degree) << what;
      EXPECT_EQ(ctx.replicate() ? ctx.replicate()->size() : 1, plan.dp.degree / plan.dp.shard_degree) << what;
    });
  }
}

// Memory checked before allocating: a layout whose planned peak exceeds the
// budget fails in the Trainer's constructor, at once and without allocating
// the model, naming the rank, its largest categories and flags that fit; one
// budget byte more than the peak passes.
TEST(MemoryCheck, ALayoutThatCannotFitFailsBeforeAllocating) {
  train::TrainOptions o;
  o.model = "gpt2";
  o.micro_batch = 8;
  o.seq_len = 1024;
  o.global_batch = 16;
  o.steps = 1;
  int worst = -1;
  const uint64_t peak = train::worst_rank_peak(o, 2, &worst);
  uint64_t max_plan = 0;
  for (int r = 0; r < 2; ++r) max_plan = std::max<uint64_t>(max_plan, parallel::plan_memory(o, 2, r).total());
  EXPECT_EQ(peak, max_plan);  // nothing saved or resumed: the plan alone
  o.max_memory = 3ull << 30;  // far below the ~16 GiB peak
  const auto data = tokens(40000, 5);
  const size_t rss0 = process_peak_rss_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    comm::run_local(2, [&](comm::Communicator& w) { train::Trainer t(o, w, data, nullptr); });
  } catch (const ConfigError& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(msg.find("rank " + std::to_string(worst) + " needs "), std::string::npos) << msg;
  EXPECT_NE(msg.find("activations"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--max-memory 3.0 GiB per rank"), std::string::npos) << msg;
  EXPECT_NE(msg.find("would fit: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("--recompute full"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" together ("), std::string::npos) << msg;  // no single change fits 3 GiB
  EXPECT_LT(s, 5.0);
  EXPECT_LT(process_peak_rss_bytes() - rss0, size_t{256} << 20) << "the model was allocated first";
  // Saving adds the checkpoint copies to the peak.
  auto saving = o;
  saving.save_dir = "unused";
  EXPECT_EQ(train::worst_rank_peak(saving, 2), peak + 12 * parallel::plan_memory(o, 2, 0).num_params);
}

TEST(MemoryCheck, TheBudgetIsExact) {
  auto o = train::TrainOptions{};
  o.model = "tiny";
  o.micro_batch = 2;
  o.seq_len = 16;
  o.global_batch = 4;
  const uint64_t peak = train::worst_rank_peak(o, 2);
  EXPECT_THROW(train::check_memory_fits(o, 2, peak - 1, "test"), ConfigError);
  EXPECT_NO_THROW(train::check_memory_fits(o, 2, peak, "test"));
  try {
    train::check_memory_fits(o, 2, 1000, "test");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no change of"), std::string::npos) << e.what();
  }
}
