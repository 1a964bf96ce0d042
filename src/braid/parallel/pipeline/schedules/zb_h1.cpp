// zb-h1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024,
// sec. 3, ZB-H1): stage s runs w = min(P-1-s, m) warm-up forwards, then for
// i = 0..m-1: forward(w+i) if w+i < m, backward_input(i), and
// backward_weight(i-s) if i >= s; then the remaining backward_weights. The
// weight gradients of stage s lag its input gradients by s micro-batches and
// fill 1F1B's cool-down bubble; at most P micro-batches are alive on any
// stage (1F1B's stage-0 peak).
//
// Bubble with T_F = T_B = T_W: the bubble time is (P-1)(T_F + T_B - T_W)
// (sec. 3), i.e. (P-1)/(3m + P-1) for m >= P, about a third of 1F1B's.
#include <algorithm>

#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

namespace {

double bubble(int P, int m, int) { return (P - 1.0) / (3.0 * m + P - 1.0); }

std::string assumption(int P, int m, int) { return m < P ? "the formula assumes m >= P" : ""; }

std::vector<StageProgram> build(int P, int m, int) {
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& p = prog[static_cast<size_t>(s)];
    const int warm = push_warmup_forwards(p, P, s, m);
    for (int i = 0; i < m; ++i) {
      if (warm + i < m) p.push_back({PipeOp::forward, warm + i});
      p.push_back({PipeOp::backward_input, i});
      // Stage s defers W by s micro-batches: stage s's cool-down bubble is
      // filled with the weight gradients it put off.
      if (i - s >= 0) p.push_back({PipeOp::backward_weight, i - s});
    }
    for (int j = std::max(0, m - s); j < m; ++j) p.push_back({PipeOp::backward_weight, j});
  }
  return prog;
}

std::string refuse(const ScheduleModes& modes) { return refuse_recompute_for_split_backward("zb-h1", modes); }

std::vector<int> planner_chunks(int P, int64_t, int64_t) { return P > 1 ? std::vector<int>{1} : std::vector<int>{}; }

}  // namespace

ScheduleDef zb_h1_schedule() {
  return {.name = "zb-h1",
          .description = "1F1B with the backward split into B and deferred W (ZB-H1, Qi et al., ICLR 2024)",
          .refuse = refuse, .build = build, .bubble = bubble, .bubble_text = "(P-1)/(3m+P-1)",
          .assumption = assumption, .planner_chunks = planner_chunks};
}

}  // namespace braid::parallel
