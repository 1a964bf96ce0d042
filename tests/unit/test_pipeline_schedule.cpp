// Pipeline schedules checked on the tables alone: every stage runs each
// forward and backward once, nothing deadlocks, the simulated bubble equals
// (P-1)/(m+P-1) for GPipe and 1F1B, and 1F1B keeps at most P - s micro-batches
// alive on stage s.
#include <gtest/gtest.h>

#include <cmath>

#include "braid/core/error.h"
#include "braid/parallel/pipeline.h"

using namespace braid;
using parallel::PipeOp;

TEST(PipelineSchedule, EveryScheduleIsValidForAllSizes) {
  for (auto kind : {parallel::ScheduleKind::naive, parallel::ScheduleKind::gpipe,
                    parallel::ScheduleKind::one_f_one_b}) {
    for (int P = 1; P <= 8; ++P) {
      for (int m = 1; m <= 3 * P; ++m) {
        const auto prog = parallel::build_schedule(kind, P, m);
        const auto st = parallel::check_schedule(prog, P, m);
        const std::string what = std::string(parallel::schedule_name(kind)) + " P=" + std::to_string(P) +
                                 " m=" + std::to_string(m);
        if (kind == parallel::ScheduleKind::naive) {
          // One micro-batch in flight at a time: the pipeline never overlaps.
          EXPECT_NEAR(st.makespan, 3.0 * P * m, 1e-9) << what;
          for (int s = 0; s < P; ++s) EXPECT_EQ(st.peak_in_flight[static_cast<size_t>(s)], 1) << what;
        } else {
          EXPECT_NEAR(st.bubble, parallel::theoretical_bubble(P, m), 1e-9) << what;
        }
        if (kind == parallel::ScheduleKind::gpipe) {
          EXPECT_EQ(st.peak_in_flight[0], m) << what;
        }
        if (kind == parallel::ScheduleKind::one_f_one_b) {
          for (int s = 0; s < P; ++s)
            EXPECT_LE(st.peak_in_flight[static_cast<size_t>(s)], std::min(P - s, m)) << what << " stage " << s;
        }
      }
    }
  }
}

TEST(PipelineSchedule, BrokenTablesAreRejected) {
  // Stage 0 runs B0 before F1 while stage 1 runs F1 before B0: F1 on stage 1
  // needs F1 on stage 0, which waits for B0 from stage 1, which comes after F1
  // on stage 1 — a receive no send will ever match.
  std::vector<parallel::StageProgram> prog(2);
  prog[0] = {{PipeOp::forward, 0}, {PipeOp::backward, 0}, {PipeOp::forward, 1}, {PipeOp::backward, 1}};
  prog[1] = {{PipeOp::forward, 0}, {PipeOp::forward, 1}, {PipeOp::backward, 0}, {PipeOp::backward, 1}};
  try {
    parallel::check_schedule(prog, 2, 2);
    FAIL() << "deadlock not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
  auto twice = parallel::build_schedule(parallel::ScheduleKind::gpipe, 2, 2);
  twice[1].push_back({PipeOp::forward, 0});
  EXPECT_THROW(parallel::check_schedule(twice, 2, 2), Error);
  auto missing = parallel::build_schedule(parallel::ScheduleKind::gpipe, 2, 2);
  missing[0].pop_back();
  EXPECT_THROW(parallel::check_schedule(missing, 2, 2), Error);
  auto early = parallel::build_schedule(parallel::ScheduleKind::gpipe, 1, 1);
  std::swap(early[0][0], early[0][1]);
  EXPECT_THROW(parallel::check_schedule(early, 1, 1), Error);
  EXPECT_THROW(parallel::parse_schedule("zb-h1"), ConfigError);
}
