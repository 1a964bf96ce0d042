// Parameter server: synchronous mode is DDP's training run; asynchronous mode
// keeps its staleness bound and still learns.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <set>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/train/trainer.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

train::TrainOptions ps_opts() {
  auto o = testing_harness::tiny_options(8);
  o.steps = 12;
  o.global_batch = 6;
  o.warmup_steps = 2;
  return o;
}

using PsRun = testing_harness::RankRuns;
using testing_harness::synthetic_tokens;

PsRun ps_run(const train::TrainOptions& o, int ranks, const std::vector<uint16_t>& data) {
  return testing_harness::run_ranks(o, ranks, data);
}

}  // namespace

TEST(ParameterServer, SynchronousIsDdp) {
  const auto data = synthetic_tokens(20000, 2);
  auto o = ps_opts();
  const PsRun single = ps_run(o, 1, data);
  const PsRun ddp2 = ps_run(o, 2, data);
  o.dp_mode = "ps";
  // 1 worker: the server's sum of one push divided by 1 is the gradient itself.
  const PsRun ps1 = ps_run(o, 2, data);
  EXPECT_EQ(ps1.hash[0], single.hash[0]);
  // 2 workers: (a+b)/2 in both, same clipping norm and update: bitwise DDP.
  const PsRun ps2 = ps_run(o, 3, data);
  EXPECT_EQ(std::set<uint64_t>(ps2.hash.begin(), ps2.hash.end()).size(), 1u);
  EXPECT_EQ(ps2.hash[0], ddp2.hash[0]);
  for (size_t i = 0; i < ddp2.steps[0].size(); ++i) {
    EXPECT_EQ(ps2.steps[0][i].loss, ddp2.steps[0][i].loss) << "step " << i;
    EXPECT_EQ(ps2.steps[1][i].loss, ddp2.steps[0][i].loss) << "worker record, step " << i;
  }
  // 3 workers: the single-rank run to rtol 1e-5.
  const PsRun ps3 = ps_run(o, 4, data);
  for (size_t i = 0; i < single.steps[0].size(); ++i) {
    EXPECT_NEAR(ps3.steps[0][i].loss, single.steps[0][i].loss, 1e-5 * single.steps[0][i].loss) << i;
    EXPECT_NEAR(ps3.steps[0][i].grad_norm, single.steps[0][i].grad_norm,
                1e-5 * single.steps[0][i].grad_norm) << i;
  }
  // Only the server holds AdamW moments.
  EXPECT_GT(ps3.optimizer_bytes[0], 0u);
  for (int w = 1; w < 4; ++w) EXPECT_EQ(ps3.optimizer_bytes[static_cast<size_t>(w)], 0u);
}

TEST(ParameterServer, TrafficGrowsWithWorkersAtTheServer) {
  // Each worker pushes Ψ floats and pulls Ψ; the server receives and sends W·Ψ
  // (plus small headers). A ring rank sends 2Ψ(N−1)/N whatever N is.
  const auto data = synthetic_tokens(20000, 3);
  auto o = ps_opts();
  o.steps = 2;
  o.check_replicas = false;
  o.dp_mode = "ps";
  const double psi_bytes = [&] {
    model::GPT g(model::GPTConfig::preset("tiny"), 1, 16);
    return static_cast<double>(g.num_params()) * 4;
  }();
  for (int W : {1, 2, 3}) {
    const PsRun r = ps_run(o, W + 1, data);
    const auto& s = r.steps[0].back();
    EXPECT_NEAR(static_cast<double>(s.comm_bytes_received), W * psi_bytes, 0.001 * W * psi_bytes);
    EXPECT_NEAR(static_cast<double>(s.comm_bytes_sent), W * psi_bytes, 0.001 * W * psi_bytes);
    const auto& w1 = r.steps[1].back();
    EXPECT_NEAR(static_cast<double>(w1.comm_bytes_sent), psi_bytes, 0.001 * psi_bytes);
    EXPECT_NEAR(static_cast<double>(w1.comm_bytes_received), psi_bytes, 0.001 * psi_bytes);
  }
}

TEST(ParameterServer, AsynchronousKeepsItsStalenessBoundAndLearns) {
  const auto data = synthetic_tokens(20000, 4);
  auto o = ps_opts();
  o.steps = 10;
  o.dp_mode = "ps";
  o.ps_async = true;
  auto plain = ps_opts();
  plain.steps = o.steps;
  const PsRun single = ps_run(plain, 1, data);
  // One worker: nothing can be stale; every update is the single-rank update.
  o.staleness = 3;
  const PsRun a1 = ps_run(o, 2, data);
  EXPECT_EQ(a1.hash[0], single.hash[0]);
  for (const auto& r : a1.steps[0]) EXPECT_EQ(r.staleness_max, 0);
  for (int W : {2, 3}) {
    for (int64_t k : {0, 2}) {
      o.staleness = k;
      const PsRun r = ps_run(o, W + 1, data);
      ASSERT_EQ(r.steps[0].size(), static_cast<size_t>(o.steps));
      // Worker w pulls for iteration i only when every worker has pushed >= i-k
      // times, and another worker can push at most up to iteration i+k before w
      // pushes i: at most 2k+1 updates of each other worker are missed.
      for (const auto& s : r.steps[0]) EXPECT_LE(s.staleness_max, (2 * k + 1) * (W - 1)) << "W=" << W << " k=" << k;
      EXPECT_LT(r.steps[0].back().loss, r.steps[0].front().loss - 0.15f) << "W=" << W << " k=" << k;
      // After the run every rank holds the server's weights.
      EXPECT_EQ(std::set<uint64_t>(r.hash.begin(), r.hash.end()).size(), 1u);
    }
  }
}

TEST(ParameterServer, ConfigErrors) {
  auto cfg = model::GPTConfig::preset("tiny");
  auto o = ps_opts();
  o.dp_mode = "ps";
  EXPECT_THROW(train::validate_options(o, 1, cfg), ConfigError);  // no worker
  o.zero = 1;
  EXPECT_THROW(train::validate_options(o, 3, cfg), ConfigError);
  o.zero = 0;
  o.global_batch = 5;
  EXPECT_THROW(train::validate_options(o, 3, cfg), ConfigError);  // 5 % (2 workers x 1)
  o = ps_opts();
  o.ps_async = true;  // without --dp-mode ps
  EXPECT_THROW(train::validate_options(o, 3, cfg), ConfigError);
  o.dp_mode = "bogus";
  EXPECT_THROW(train::validate_options(o, 3, cfg), ConfigError);
}

TEST(ParameterServer, AFailingServerOrWorkerStopsTheJob) {
  const auto data = synthetic_tokens(20000, 6);
  auto o = ps_opts();
  o.steps = 4;
  o.dp_mode = "ps";
  for (bool async : {false, true}) {
    for (int rank : {0, 2}) {
      o.ps_async = async;
      o.staleness = async ? 1 : 0;
      o.inject_failure_rank = rank;
      o.inject_failure_step = 1;
      try {
        ps_run(o, 3, data);
        ADD_FAILURE() << "no failure: async=" << async << " rank " << rank;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("injected failure on rank " + std::to_string(rank)),
                  std::string::npos) << e.what();
      }
    }
  }
}
