// found_inf_all_ranks: one rank's overflow must make every rank skip the step.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/train/loss_scaler.h"

namespace braid::train {
namespace {

TEST(FoundInfAllRanks, AnyRankOverflowReachesEveryRank) {
  for (int n = 1; n <= 8; ++n) {
    // bad = -1: no rank overflows; otherwise only rank `bad` does.
    for (int bad = -1; bad < n; ++bad) {
      std::vector<int> got(size_t(n), -1);
      comm::run_local(n, [&](comm::Communicator& c) {
        got[size_t(c.rank())] = found_inf_all_ranks(c, c.rank() == bad) ? 1 : 0;
      });
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(got[size_t(r)], bad >= 0 ? 1 : 0)
            << "world " << n << " bad " << bad << " rank " << r;
    }
  }
}

// Scalers fed the reduced flag stay in lockstep although ranks see different
// local overflows.
TEST(FoundInfAllRanks, ScalersStayInLockstep) {
  const int n = 4;
  std::vector<float> scales(n);
  std::vector<int64_t> skipped(n);
  comm::run_local(n, [&](comm::Communicator& c) {
    LossScaleOptions o;
    o.growth_interval = 2;
    DynamicLossScaler s(o);
    for (int step = 0; step < 20; ++step) {
      const bool local = (step * 7 + c.rank()) % 5 == 0;  // differs across ranks
      s.update(found_inf_all_ranks(c, local));
    }
    scales[size_t(c.rank())] = s.scale();
    skipped[size_t(c.rank())] = s.skipped_steps();
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(scales[size_t(r)], scales[0]);
    EXPECT_EQ(skipped[size_t(r)], skipped[0]);
  }
  EXPECT_GT(skipped[0], 0);
}

}  // namespace
}  // namespace braid::train
