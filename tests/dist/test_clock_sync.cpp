// Clock offsets to rank 0 over the local backend (ranks as threads of one
// process): the shared steady clock gives offsets near 0 within a small bound;
// clocks skewed on purpose are recovered within the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/train/clock_sync.h"

namespace braid::train {
namespace {

std::vector<ClockOffset> measure(int n, double skew_per_rank_us) {
  std::vector<ClockOffset> out(static_cast<size_t>(n));
  comm::run_local(n, [&](comm::Communicator& c) {
    const double skew = skew_per_rank_us * c.rank();
    out[static_cast<size_t>(c.rank())] = measure_clock_offset(c, 16, [skew] { return steady_now_us() + skew; });
  });
  return out;
}

TEST(ClockSyncLocal, SharedClockGivesOffsetsNearZero) {
  const auto o = measure(4, 0);
  EXPECT_EQ(o[0].offset_us, 0);
  EXPECT_EQ(o[0].error_us, 0);
  for (size_t r = 1; r < o.size(); ++r) {
    EXPECT_GE(o[r].error_us, 0) << r;
    EXPECT_LT(o[r].error_us, 5000) << r;  // threads of one process: a loaded machine stays well under 5 ms
    EXPECT_LE(std::abs(o[r].offset_us), o[r].error_us + 1e-3) << r;
  }
}

TEST(ClockSyncLocal, RecoversSkewedClocks) {
  // Rank r's clock runs r x 1 s ahead of rank 0's: its offset is -r x 1 s.
  const auto o = measure(3, 1e6);
  for (size_t r = 1; r < o.size(); ++r)
    EXPECT_LE(std::abs(o[r].offset_us + 1e6 * static_cast<double>(r)), o[r].error_us + 1e-3) << r;
}

TEST(ClockSyncLocal, SingleRankAndBadArguments) {
  comm::run_local(1, [](comm::Communicator& c) {
    const auto o = measure_clock_offset(c);
    EXPECT_EQ(o.offset_us, 0);
    EXPECT_EQ(o.error_us, 0);
    EXPECT_THROW(measure_clock_offset(c, 0), Error);
  });
}

}  // namespace
}  // namespace braid::train
