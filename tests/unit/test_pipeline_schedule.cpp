// Pipeline schedules checked on the tables alone: every rank runs each action
// once, nothing deadlocks under rendezvous sends, the simulated bubble equals
// the closed form where one is exact (GPipe and 1F1B: (P-1)/(m+P-1);
// interleaved with P | m: (P-1)/(vm+P-1); ZB-H1 with m >= P: (P-1)/(3m+P-1)),
// and the activation peaks stay within each schedule's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/draw.h"

using namespace braid;
using parallel::PipeOp;

namespace {

// The schedules of the registry these tests know by name.
enum class ScheduleKind { naive, gpipe, one_f_one_b, interleaved, zb_h1 };
const char* schedule_name(ScheduleKind k) {
  const char* names[] = {"naive", "gpipe", "1f1b", "interleaved", "zb-h1"};
  return names[static_cast<int>(k)];
}
const parallel::ScheduleDef& def(ScheduleKind k) { return parallel::find_schedule(schedule_name(k)); }

bool accepts(ScheduleKind kind, int P, int v) {
  if (kind == ScheduleKind::interleaved) return P >= 2 && v >= 2;
  return v == 1;
}

}  // namespace

TEST(PipelineSchedule, EveryScheduleIsValidForAllSizes) {
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                    ScheduleKind::zb_h1}) {
    for (int v = 1; v <= 3; ++v) {
      for (int P = 1; P <= 8; ++P) {
        for (int m = 1; m <= 3 * P; ++m) {
          const std::string what = std::string(schedule_name(kind)) + " P=" + std::to_string(P) +
                                   " m=" + std::to_string(m) + " v=" + std::to_string(v);
          if (!accepts(kind, P, v)) {
            EXPECT_THROW(parallel::build_schedule(def(kind), P, m, v), ConfigError) << what;
            continue;
          }
          const auto prog = parallel::build_schedule(def(kind), P, m, v);
          const auto st = parallel::check_schedule(prog, P, m, v);  // table checks + no deadlock
          size_t actions = 0;
          for (const auto& p : prog) actions += p.size();
          const size_t per = kind == ScheduleKind::zb_h1 ? 3 : 2;  // F, B or F, B, W
          EXPECT_EQ(actions, per * static_cast<size_t>(P) * static_cast<size_t>(m) * static_cast<size_t>(v)) << what;

          // Rendezvous with one or two gradient send buffers neither deadlocks
          // nor delays a builtin schedule (interleaved ranks do block on a send
          // at times, but only while they would wait for a receive anyway).
          const auto roomy = parallel::check_schedule(prog, P, m, v, 1.0, 2.0, m * v + 1);
          const auto one = parallel::check_schedule(prog, P, m, v, 1.0, 2.0, 1);
          EXPECT_NEAR(st.makespan, roomy.makespan, 1e-9) << what;
          EXPECT_NEAR(one.makespan, roomy.makespan, 1e-9) << what;
          EXPECT_EQ(roomy.send_wait, 0.0) << what;
          if (kind != ScheduleKind::interleaved) {
            EXPECT_EQ(one.send_wait, 0.0) << what;
          }

          const double theory = parallel::theoretical_bubble(def(kind), P, m, v);
          const double f1b = parallel::theoretical_bubble(def(ScheduleKind::one_f_one_b), P, m);
          switch (kind) {
            case ScheduleKind::naive:
              // One micro-batch in flight at a time: the pipeline never overlaps.
              EXPECT_NEAR(st.makespan, 3.0 * P * m, 1e-9) << what;
              EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
              for (int s = 0; s < P; ++s) EXPECT_EQ(st.peak_in_flight[static_cast<size_t>(s)], 1) << what;
              break;
            case ScheduleKind::gpipe:
              EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
              EXPECT_EQ(st.peak_in_flight[0], m) << what;
              break;
            case ScheduleKind::one_f_one_b:
              EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
              for (int s = 0; s < P; ++s)
                EXPECT_LE(st.peak_in_flight[static_cast<size_t>(s)], std::min(P - s, m)) << what << " stage " << s;
              break;
            case ScheduleKind::zb_h1:
              if (m >= P) {
                EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
                EXPECT_NEAR(st.makespan, 3.0 * m + P - 1, 1e-9) << what;
              } else {
                // Too few micro-batches to fill the warm-up: the makespan is
                // 2m + 2P - 1 (F = B = W = 1), above the paper's 3m + P - 1.
                EXPECT_NEAR(st.makespan, 2.0 * m + 2 * P - 1, 1e-9) << what;
              }
              if (P >= 2) {
                EXPECT_LT(st.bubble, f1b) << what;
              }
              if (P >= 2 && m == 3 * P) {
                EXPECT_LE(st.bubble / f1b, 0.5) << what;
              }
              for (int s = 0; s < P; ++s)
                EXPECT_LE(st.peak_in_flight[static_cast<size_t>(s)], std::min(P, m)) << what << " stage " << s;
              break;
            case ScheduleKind::interleaved:
              if (m % P == 0) {
                // Megatron's warm-up, unchanged: exact bubble, and the peak on
                // rank s is its warm-up + 1 chunk-micro-batches.
                EXPECT_NEAR(st.bubble, theory, 1e-9) << what;
                for (int s = 0; s < P; ++s)
                  EXPECT_EQ(st.peak_in_flight[static_cast<size_t>(s)],
                            std::min((P - s - 1) * 2 + (v - 1) * P + 1, m * v))
                      << what << " stage " << s;
              } else {
                // A last group smaller than P leaves gaps the formula does not count.
                EXPECT_GT(st.bubble, theory) << what;
              }
              break;
          }
          for (int s = 0; s < P; ++s) {
            int sum = 0;
            for (int c = 0; c < v; ++c) {
              const int pc = st.peak_in_flight_chunk[static_cast<size_t>(s)][static_cast<size_t>(c)];
              EXPECT_GE(pc, 1) << what;
              EXPECT_LE(pc, m) << what;
              sum += pc;
            }
            EXPECT_GE(sum, st.peak_in_flight[static_cast<size_t>(s)]) << what;
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedShrinksTheBubbleByV) {
  // Narayanan et al. 2021, sec. 2.2.2: the bubble time is (P-1)/v forward +
  // backward times, P | m.
  for (int v : {2, 3}) {
    const auto st = parallel::check_schedule(parallel::build_schedule(schedule_name(ScheduleKind::interleaved), 4, 8, v), 4, 8, v);
    EXPECT_NEAR(st.makespan, 3.0 * 8 + 3.0 * 3 / v, 1e-9) << "v=" << v;
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
    const std::string msg = e.what();
    EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 waits in backward (chunk 0, micro 0) to receive"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 waits in forward (chunk 0, micro 1) to receive"), std::string::npos) << msg;
  }

  // Deadlock through rendezvous alone: stage 0 takes the gradients in the
  // order 1, 0; stage 1 sends 0, then 1. With one send buffer the send of 1
  // waits for the receive of 0, which stage 0 posts only after receiving 1.
  std::vector<parallel::StageProgram> swap(2);
  swap[0] = {{PipeOp::forward, 0}, {PipeOp::forward, 1}, {PipeOp::backward, 1}, {PipeOp::backward, 0}};
  swap[1] = {{PipeOp::forward, 0}, {PipeOp::forward, 1}, {PipeOp::backward, 0}, {PipeOp::backward, 1}};
  EXPECT_NO_THROW(parallel::check_schedule(swap, 2, 2, 1, 1.0, 2.0, 2));
  try {
    parallel::check_schedule(swap, 2, 2, 1, 1.0, 2.0, 1);
    FAIL() << "rendezvous deadlock not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 waits in backward (chunk 0, micro 1) for gradient send buffer 0"),
              std::string::npos)
        << e.what();
  }

  auto twice = parallel::build_schedule(schedule_name(ScheduleKind::gpipe), 2, 2);
  twice[1].push_back({PipeOp::forward, 0});
  EXPECT_THROW(parallel::check_schedule(twice, 2, 2), Error);
  auto missing = parallel::build_schedule(schedule_name(ScheduleKind::gpipe), 2, 2);
  missing[0].pop_back();
  EXPECT_THROW(parallel::check_schedule(missing, 2, 2), Error);
  auto early = parallel::build_schedule(schedule_name(ScheduleKind::gpipe), 1, 1);
  std::swap(early[0][0], early[0][1]);
  EXPECT_THROW(parallel::check_schedule(early, 1, 1), Error);
  auto chunk = parallel::build_schedule(schedule_name(ScheduleKind::gpipe), 2, 2);
  chunk[0][0].chunk = 1;
  EXPECT_THROW(parallel::check_schedule(chunk, 2, 2), Error);  // v = 1: chunk 1 does not exist

  // Zero-bubble pairs: W before its B, W missing, B and the full backward mixed.
  auto zb = parallel::build_schedule(schedule_name(ScheduleKind::zb_h1), 2, 2);
  auto w_first = zb;
  for (auto& p : w_first)
    for (size_t i = 0; i + 1 < p.size(); ++i)
      if (p[i].op == PipeOp::backward_input && p[i + 1].op == PipeOp::backward_weight &&
          p[i].micro == p[i + 1].micro) {
        std::swap(p[i], p[i + 1]);
        break;
      }
  EXPECT_THROW(parallel::check_schedule(w_first, 2, 2), Error);
  auto no_w = zb;
  no_w[1].pop_back();
  EXPECT_THROW(parallel::check_schedule(no_w, 2, 2), Error);
  auto mixed = zb;
  mixed[0].push_back({PipeOp::backward, 0});
  EXPECT_THROW(parallel::check_schedule(mixed, 2, 2), Error);
}

TEST(PipelineSchedule, NamesAndOptions) {
  for (auto kind : {ScheduleKind::naive, ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                    ScheduleKind::zb_h1})
    EXPECT_EQ(parallel::find_schedule(schedule_name(kind)).name, std::string(schedule_name(kind)));
  EXPECT_THROW(parallel::find_schedule("zb-h2"), ConfigError);
  EXPECT_THROW(parallel::build_schedule(schedule_name(ScheduleKind::one_f_one_b), 4, 8, 2), ConfigError);
  EXPECT_THROW(parallel::build_schedule(schedule_name(ScheduleKind::interleaved), 4, 8, 1), ConfigError);
  EXPECT_THROW(parallel::build_schedule(schedule_name(ScheduleKind::interleaved), 1, 8, 2), ConfigError);
  EXPECT_THROW(parallel::build_schedule(schedule_name(ScheduleKind::zb_h1), 4, 8, 0), ConfigError);
  EXPECT_NEAR(parallel::theoretical_bubble(def(ScheduleKind::one_f_one_b), 4, 8), 3.0 / 11, 1e-12);
}

TEST(PipelineSchedule, DrawingShowsChunksAndSplitBackward) {
  // Cells in the first row of a drawing (one per column).
  const auto columns = [](const std::string& text) {
    std::istringstream row(text.substr(text.find('|') + 1, text.find('\n') - text.find('|') - 1));
    int n = 0;
    for (std::string cell; row >> cell;) ++n;
    return n;
  };
  const auto zb = parallel::check_schedule(parallel::build_schedule(schedule_name(ScheduleKind::zb_h1), 2, 2), 2, 2);
  const std::string text = parallel::draw_schedule(zb, 2);
  EXPECT_NE(text.find("b0"), std::string::npos) << text;
  EXPECT_NE(text.find("W1"), std::string::npos) << text;
  EXPECT_EQ(columns(text), 7) << text;  // columns of B = W = 1: 3m + P - 1
  EXPECT_NE(parallel::schedule_svg(zb, 2, "zb").find("#fdd0a2"), std::string::npos);  // W in orange

  const auto il = parallel::check_schedule(parallel::build_schedule(schedule_name(ScheduleKind::interleaved), 2, 2, 2), 2, 2, 2);
  const std::string t2 = parallel::draw_schedule(il, 2);
  EXPECT_NE(t2.find("F1.1"), std::string::npos) << t2;
  EXPECT_EQ(columns(t2), 15) << t2;  // makespan 3m + 3(P-1)/v = 7.5 in columns of 0.5
}
