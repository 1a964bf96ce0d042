// Cristian's estimate of a clock offset from ping-pong timestamps.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/train/clock_sync.h"

namespace braid::train {
namespace {

TEST(ClockSync, SymmetricRoundTripGivesExactOffset) {
  // Peer clock = own + 1000 us; 40 us each way; the peer reads its clock halfway.
  const auto o = estimate_clock_offset({{100, 100 + 40 + 1000, 180}});
  EXPECT_DOUBLE_EQ(o.offset_us, 1000);
  EXPECT_DOUBLE_EQ(o.error_us, 40);
}

TEST(ClockSync, KeepsTheShortestRoundTrip) {
  // True offset -500 us. The slow probes are skewed by one-way delays; the fast
  // one's midpoint is 3 us off, inside its bound of 5 us.
  const std::vector<ClockProbe> probes = {
      {0, 0 + 900 - 500, 1000},     // reply delayed: 900 out, 100 back
      {2000, 2008 - 500, 2010},     // 8 out, 2 back
      {3000, 3050 - 500, 3400},     // 50 out, 350 back
  };
  const auto o = estimate_clock_offset(probes);
  EXPECT_DOUBLE_EQ(o.error_us, 5);
  EXPECT_DOUBLE_EQ(o.offset_us, 2008 - 500 - 2005);
  EXPECT_LE(std::abs(o.offset_us - (-500)), o.error_us);
}

TEST(ClockSync, BoundHoldsForAnyOneWayDelays) {
  // Whatever the split of a round trip, the true offset lies within error_us.
  const double truth = 123456.5;
  for (double out = 0; out <= 100; out += 10) {
    const double back = 100 - out;
    const auto o = estimate_clock_offset({{50, 50 + out + truth, 50 + out + back}});
    EXPECT_LE(std::abs(o.offset_us - truth), o.error_us + 1e-9) << out;
    EXPECT_DOUBLE_EQ(o.error_us, 50);
  }
}

TEST(ClockSync, RejectsEmptyAndBackwardProbes) {
  EXPECT_THROW(estimate_clock_offset({}), Error);
  EXPECT_THROW(estimate_clock_offset({{10, 0, 5}}), Error);
}

}  // namespace
}  // namespace braid::train
