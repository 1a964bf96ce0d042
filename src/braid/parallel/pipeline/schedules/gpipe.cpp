// gpipe (Huang et al. 2019): all m forwards, then all m backwards. Bubble
// (P-1)/(m+P-1) (Narayanan et al. 2021, sec. 2.2.1); m micro-batches alive.
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

namespace {

std::vector<StageProgram> build(int P, int m, int) {
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (auto& p : prog) {
    for (int j = 0; j < m; ++j) p.push_back({PipeOp::forward, j});
    for (int j = 0; j < m; ++j) p.push_back({PipeOp::backward, j});
  }
  return prog;
}

double bubble(int P, int m, int) { return (P - 1.0) / (m + P - 1.0); }

}  // namespace

ScheduleDef gpipe_schedule() {
  // Not in the composability matrix: 1F1B's passes in another order.
  return {.name = "gpipe", .description = "all forwards, then all backwards (Huang et al. 2019)",
          .build = build, .bubble = bubble, .bubble_text = "(P-1)/(m+P-1)", .in_matrix = false};
}

}  // namespace braid::parallel
