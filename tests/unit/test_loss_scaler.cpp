// DynamicLossScaler state machine (growth, backoff, hysteresis, floor, skip
// counts, disabled mode), option validation and checkpoint state round trip.
#include <gtest/gtest.h>

#include <string>

#include "braid/core/error.h"
#include "braid/train/loss_scaler.h"

namespace braid::train {
namespace {

LossScaleOptions small_opts() {
  LossScaleOptions o;
  o.initial_scale = 1024.0f;
  o.growth_interval = 3;
  return o;
}

TEST(LossScaler, DefaultsArePyTorchGradScaler) {
  DynamicLossScaler s;
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.options().growth_interval, 1000);
  EXPECT_EQ(s.options().hysteresis, 1);
}

TEST(LossScaler, GrowsAfterExactlyGrowthIntervalCleanSteps) {
  DynamicLossScaler s(small_opts());
  for (int round = 0; round < 3; ++round) {
    const float before = s.scale();
    for (int i = 0; i < 2; ++i) {
      EXPECT_FALSE(s.update(false));
      EXPECT_EQ(s.scale(), before) << "grew early, round " << round << " step " << i;
    }
    EXPECT_FALSE(s.update(false));
    EXPECT_EQ(s.scale(), before * 2.0f) << "round " << round;
    EXPECT_EQ(s.state().growth_tracker, 0);
  }
  EXPECT_EQ(s.skipped_steps(), 0);
  EXPECT_EQ(s.steps(), 9);
}

TEST(LossScaler, OverflowSkipsBacksOffAndResetsGrowth) {
  DynamicLossScaler s(small_opts());
  s.update(false);
  s.update(false);  // one clean step short of growing
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.state().growth_tracker, 0);
  // The interval restarts: growth only after 3 more clean steps.
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 512.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_EQ(s.steps(), 6);
}

TEST(LossScaler, HysteresisOneBacksOffOnEveryOverflow) {
  DynamicLossScaler s(small_opts());
  for (float expect : {512.0f, 256.0f, 128.0f}) {
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), expect);
  }
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, HysteresisTwoNeedsTwoOverflows) {
  LossScaleOptions o = small_opts();
  o.hysteresis = 2;
  DynamicLossScaler s(o);
  EXPECT_TRUE(s.update(true));  // first overflow: skipped, scale kept
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_FALSE(s.update(false));  // a clean step does not refill hysteresis...
  EXPECT_EQ(s.state().hysteresis_left, 1);
  EXPECT_TRUE(s.update(true));  // ...so the second overflow backs off
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.state().hysteresis_left, 0);
  // Used up: every further overflow backs off until the next growth (Megatron).
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0f);
  // A growth refills it.
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(LossScaler, MinScaleFloor) {
  LossScaleOptions o = small_opts();
  o.initial_scale = 8.0f;
  o.min_scale = 3.0f;
  DynamicLossScaler s(o);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0f);
  s.update(true);
  EXPECT_EQ(s.scale(), 3.0f);  // 2 would be below the floor
  EXPECT_TRUE(s.update(true));  // still skipped at the floor
  EXPECT_EQ(s.scale(), 3.0f);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, GrowthStopsBeforeF32Overflow) {
  LossScaleOptions o;
  o.initial_scale = 2e38f;  // x2 > FLT_MAX (3.4e38)
  o.growth_interval = 1;
  DynamicLossScaler s(o);
  s.update(false);
  EXPECT_EQ(s.scale(), 2e38f);
}

TEST(LossScaler, DisabledIsScaleOneAndNeverSkips) {
  DynamicLossScaler s(LossScaleOptions{}, /*enabled=*/false);
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.update(true));
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.skipped_steps(), 0);
  EXPECT_EQ(s.steps(), 2005);
}

std::string validate_error(LossScaleOptions o) {
  try {
    o.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LossScaler, ValidateNamesBadValueAndFix) {
  struct Case {
    void (*mutate)(LossScaleOptions&);
    const char* expect;
  };
  const Case cases[] = {
      {[](LossScaleOptions& o) { o.initial_scale = 0; }, "--loss-scale 0"},
      {[](LossScaleOptions& o) { o.initial_scale = -4; }, "--loss-scale -4"},
      {[](LossScaleOptions& o) { o.growth_factor = 1; }, "--loss-scale-growth 1"},
      {[](LossScaleOptions& o) { o.backoff_factor = 1; }, "--loss-scale-backoff 1"},
      {[](LossScaleOptions& o) { o.backoff_factor = 0; }, "--loss-scale-backoff 0"},
      {[](LossScaleOptions& o) { o.growth_interval = 0; }, "--loss-scale-window 0"},
      {[](LossScaleOptions& o) { o.hysteresis = 0; }, "--loss-scale-hysteresis 0"},
      {[](LossScaleOptions& o) { o.min_scale = 0; }, "--min-loss-scale 0"},
      {[](LossScaleOptions& o) { o.min_scale = 1e6f; }, "exceeds --loss-scale 65536"},
  };
  for (const Case& c : cases) {
    LossScaleOptions o;
    c.mutate(o);
    const std::string err = validate_error(o);
    EXPECT_NE(err.find(c.expect), std::string::npos) << "want '" << c.expect << "' in: " << err;
    EXPECT_NE(err.find("use"), std::string::npos) << "no fix in: " << err;  // names a fix
    EXPECT_THROW(DynamicLossScaler{o}, ConfigError);
  }
  EXPECT_EQ(validate_error(LossScaleOptions{}), "");
}

TEST(LossScaler, StateRoundTripResumesIdentically) {
  LossScaleOptions o = small_opts();
  o.hysteresis = 2;
  DynamicLossScaler a(o);
  const bool pattern[] = {false, true, false, false, true, true, false, false, false, false};
  for (bool f : pattern) a.update(f);
  const LossScalerState st = a.state();

  DynamicLossScaler b(o);
  b.set_state(st);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.state().growth_tracker, st.growth_tracker);
  EXPECT_EQ(b.state().hysteresis_left, st.hysteresis_left);
  for (bool f : {true, false, false, false, true, true, false}) {
    EXPECT_EQ(a.update(f), b.update(f));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().growth_tracker, b.state().growth_tracker);
    EXPECT_EQ(a.state().hysteresis_left, b.state().hysteresis_left);
  }
}

TEST(LossScaler, SetStateRejectsOutOfRange) {
  DynamicLossScaler s(small_opts());
  EXPECT_THROW(s.set_state({0.0f, 0, 1}), ConfigError);
  EXPECT_THROW(s.set_state({1.0f, 3, 1}), ConfigError);   // growth_interval is 3
  EXPECT_THROW(s.set_state({1.0f, -1, 1}), ConfigError);
  EXPECT_THROW(s.set_state({1.0f, 0, 2}), ConfigError);   // hysteresis is 1
  EXPECT_EQ(s.scale(), 1024.0f) << "a rejected state must not be applied";
  s.set_state({2.0f, 2, 0});
  EXPECT_EQ(s.scale(), 2.0f);
}

}  // namespace
}  // namespace braid::train
