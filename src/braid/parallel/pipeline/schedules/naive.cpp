// naive: one micro-batch at a time through the whole pipeline (forward on
// every stage, then backward), the next only after it: model parallelism
// without pipelining. Bubble (P-1)/P: one stage busy at a time.
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

namespace {

std::vector<StageProgram> build(int P, int m, int) {
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (auto& p : prog)
    for (int j = 0; j < m; ++j) {
      p.push_back({PipeOp::forward, j});
      p.push_back({PipeOp::backward, j});
    }
  return prog;
}

double bubble(int P, int, int) { return (P - 1.0) / P; }

}  // namespace

ScheduleDef naive_schedule() {
  // Not in the composability matrix: 1F1B's passes in another order.
  return {.name = "naive", .description = "one micro-batch at a time through every stage (no pipelining)",
          .build = build, .bubble = bubble, .bubble_text = "(P-1)/P", .in_matrix = false};
}

}  // namespace braid::parallel
