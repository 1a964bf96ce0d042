// 1f1b (Narayanan et al. 2021, PipeDream-Flush): stage s runs min(P-1-s, m)
// warm-up forwards, then alternates one forward and one backward, then the
// remaining backwards; at most P - s micro-batches are alive on stage s.
// Bubble (P-1)/(m+P-1) (sec. 2.2.1), as GPipe's with less memory.
#include <algorithm>

#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

namespace {

std::vector<StageProgram> build(int P, int m, int) {
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& p = prog[static_cast<size_t>(s)];
    const int warm = push_warmup_forwards(p, P, s, m);
    for (int i = 0; i < m - warm; ++i) {
      p.push_back({PipeOp::forward, warm + i});
      p.push_back({PipeOp::backward, i});
    }
    for (int j = m - warm; j < m; ++j) p.push_back({PipeOp::backward, j});
  }
  return prog;
}

double bubble(int P, int m, int) { return (P - 1.0) / (m + P - 1.0); }

// Every pipeline depth, and no pipeline at all.
std::vector<int> planner_chunks(int, int64_t, int64_t) { return {1}; }

}  // namespace

ScheduleDef one_f_one_b_schedule() {
  return {.name = "1f1b",
          .description = "one forward one backward after a warm-up (PipeDream-Flush, Narayanan et al. 2021)",
          .build = build, .bubble = bubble, .bubble_text = "(P-1)/(m+P-1)", .planner_chunks = planner_chunks};
}

}  // namespace braid::parallel
