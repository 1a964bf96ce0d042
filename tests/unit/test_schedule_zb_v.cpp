// ZB-V (schedules/zb_v.cpp) checked on its tables: two chunks per rank in a V
// (rank r holds virtual stages r and 2P-1-r), no deadlock with 1 or 2
// gradient send buffers, at most 2P chunk micro-batches alive per rank (1F1B's
// first-stage peak), and the simulated bubble at the ideal (P-1)/(6m+P-1) for
// P <= 4, m >= P, below ZB-H1's everywhere with m >= P.
#include <gtest/gtest.h>

#include <algorithm>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/draw.h"

using namespace braid;
using parallel::PipeOp;

TEST(ScheduleZbV, ValidNoDeadlockAndAtTheIdealBubble) {
  const auto& zbv = parallel::find_schedule("zb-v");
  const auto& zbh1 = parallel::find_schedule("zb-h1");
  for (int P = 2; P <= 8; ++P) {
    const parallel::StageMap map(zbv, P, 2);
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(map.stage(r, 0), r);
      EXPECT_EQ(map.stage(r, 1), 2 * P - 1 - r);
    }
    for (int m = 1; m <= 3 * P; ++m) {
      const std::string what = "P=" + std::to_string(P) + " m=" + std::to_string(m);
      const auto prog = parallel::build_schedule(zbv, P, m, 2);
      const auto st = parallel::check_schedule(prog, map, m);
      const auto one = parallel::check_schedule(prog, map, m, 1.0, 2.0, 1);
      EXPECT_NEAR(one.makespan, st.makespan, 1e-9) << what;
      EXPECT_EQ(st.send_wait, 0.0) << what;
      size_t actions = 0;
      for (const auto& p : prog) actions += p.size();
      EXPECT_EQ(actions, 3 * 2 * static_cast<size_t>(P) * static_cast<size_t>(m)) << what;  // F, b, W per chunk
      for (int s = 0; s < P; ++s) EXPECT_LE(st.peak_in_flight[static_cast<size_t>(s)], 2 * std::min(P, m)) << what;
      const double theory = parallel::theoretical_bubble(zbv, P, m, 2);
      EXPECT_GE(st.bubble, theory - 1e-9) << what;  // the bound
      if (parallel::theory_assumption(zbv, P, m, 2).empty()) {
        EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
        EXPECT_NEAR(st.makespan, 3.0 * m + (P - 1) / 2.0, 1e-9) << what;
      }
      if (m >= P) {
        EXPECT_LT(st.bubble, parallel::theoretical_bubble(zbh1, P, m)) << what;
      }
    }
  }
}

TEST(ScheduleZbV, RefusalsAndDrawing) {
  const auto& zbv = parallel::find_schedule("zb-v");
  EXPECT_THROW(parallel::build_schedule(zbv, 1, 4, 2), ConfigError);  // needs two ranks to fold
  EXPECT_THROW(parallel::build_schedule(zbv, 4, 8, 3), ConfigError);  // two chunks per rank
  EXPECT_EQ(parallel::schedule_chunks(zbv, 1), 2);
  EXPECT_NE(zbv.refuse({"full"}).find("--recompute none"), std::string::npos);
  EXPECT_TRUE(zbv.refuse({"none"}).empty());
  const auto st = parallel::check_schedule(parallel::build_schedule(zbv, 4, 8, 2), parallel::StageMap(zbv, 4, 2), 8);
  const std::string text = parallel::draw_schedule(st, 4);
  EXPECT_NE(text.find("b0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("W7.0"), std::string::npos) << text;
}
