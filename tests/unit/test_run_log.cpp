// The run's progress line: elapsed time and the time left.
#include <gtest/gtest.h>

#include "braid/train/run_log.h"

namespace braid::train {
namespace {

TEST(RunLog, DurationsReadAsAPersonWouldWriteThem) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(192), "3m12s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(93784), "1d02h");
}

TEST(RunLog, EtaIsTheRecentStepIntervalTimesTheStepsLeft) {
  Eta eta;
  EXPECT_LT(eta.seconds_left(10), 0);  // nothing to go on yet
  eta.tick(5.0);                       // the first step carries the warm-up
  EXPECT_LT(eta.seconds_left(10), 0);
  eta.tick(6.0);
  EXPECT_DOUBLE_EQ(eta.seconds_left(10), 10.0);
  // Only the last kWindow intervals count: a slow start is forgotten.
  for (size_t i = 0; i < Eta::kWindow; ++i) eta.tick(6.0 + 2.0 * double(i + 1));
  EXPECT_DOUBLE_EQ(eta.seconds_left(3), 6.0);
  EXPECT_DOUBLE_EQ(eta.seconds_left(0), 0.0);
}

}  // namespace
}  // namespace braid::train
