// interleaved (Narayanan et al. SC21, "Efficient Large-Scale Language Model
// Training on GPU Clusters Using Megatron-LM", sec. 2.2.2; the order of
// Megatron-LM's forward_backward_pipelining_with_interleaving): rank s holds
// virtual stages s, s+P, ... (the default placement). Forwards in groups of P
// micro-batches (the last group smaller when P does not divide m), each group
// through chunk 0, then chunk 1, ..., v-1; backwards in the same groups,
// chunks v-1 down to 0. Rank s runs min((P-s-1)*2 + (v-1)*P, m*v) warm-up
// forwards, then one forward one backward, then the remaining backwards.
// Megatron requires P | m; here any m >= 1 works: where the simulated executor
// (check_schedule, 2 gradient send buffers) deadlocks with uneven groups, the
// warm-up of each rank blocked in a backward is raised by one and the table
// checked again, until it passes (all forwards first cannot deadlock). With
// P | m the formula is used as is. Needs P >= 2 and v >= 2.
//
// Bubble: the bubble time shrinks by v (sec. 2.2.2): (P-1)/v idle per m
// compute, i.e. (P-1)/(v*m + P-1), exact when P divides m.
#include <algorithm>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/check.h"

namespace braid::parallel {

namespace {

// Megatron-LM's interleaved order (get_schedule_table): micro-batches in
// groups of P, each group through chunk 0, then 1, ..., v-1; backwards visit
// the chunks from v-1 down. Returns the k-th forward (or backward) as (micro, chunk).
std::vector<std::pair<int, int>> order(int P, int m, int v, bool forward) {
  std::vector<std::pair<int, int>> out;
  out.reserve(static_cast<size_t>(m) * static_cast<size_t>(v));
  for (int g0 = 0; g0 < m; g0 += P) {
    const int g1 = std::min(g0 + P, m);
    for (int k = 0; k < v; ++k)
      for (int j = g0; j < g1; ++j) out.emplace_back(j, forward ? k : v - 1 - k);
  }
  return out;
}

// Rank s: warm[s] forwards, then one forward one backward, then the rest.
std::vector<StageProgram> programs(int P, int m, int v, const std::vector<int>& warm) {
  const auto fwd = order(P, m, v, true), bwd = order(P, m, v, false);
  const int total = m * v;
  const auto at = [](const std::vector<std::pair<int, int>>& o, int k) { return o[static_cast<size_t>(k)]; };
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& p = prog[static_cast<size_t>(s)];
    const int w = warm[static_cast<size_t>(s)];
    for (int k = 0; k < w; ++k) p.push_back({PipeOp::forward, at(fwd, k).first, at(fwd, k).second});
    for (int k = 0; k < total - w; ++k) {
      p.push_back({PipeOp::forward, at(fwd, w + k).first, at(fwd, w + k).second});
      p.push_back({PipeOp::backward, at(bwd, k).first, at(bwd, k).second});
    }
    for (int k = total - w; k < total; ++k) p.push_back({PipeOp::backward, at(bwd, k).first, at(bwd, k).second});
  }
  return prog;
}

void validate(int P, int, int v) {
  BRAID_CONFIG_CHECK(P >= 2, "--schedule interleaved needs --pp >= 2 (got --pp ", P,
                     "); with one stage use --schedule 1f1b");
  BRAID_CONFIG_CHECK(v >= 2, "--schedule interleaved needs --virtual-stages >= 2 (got ", v,
                     "); use --virtual-stages 2 or --schedule 1f1b");
}

std::vector<StageProgram> build(int P, int m, int v) {
  const int total = m * v;
  std::vector<int> warm(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) warm[static_cast<size_t>(s)] = std::min((P - s - 1) * 2 + (v - 1) * P, total);
  // Megatron's warm-up assumes P | m. With a smaller last group a rank can
  // block in a backward (on a gradient, or on a gradient send buffer whose
  // receiver is itself waiting) that needs a forward it has not run yet:
  // give each rank blocked in a backward one more warm-up forward and retry.
  // Deterministic, and it terminates: warm-up = m*v is all forwards first.
  // The check uses 2 gradient send buffers, as check_schedule's default.
  for (;;) {
    auto prog = programs(P, m, v, warm);
    try {
      check_schedule(prog, P, m, v, 1.0, 2.0, kGradSendBuffers);
      return prog;
    } catch (const ScheduleDeadlock& d) {
      bool raised = false;
      for (int s : d.blocked_in_backward)
        if (warm[static_cast<size_t>(s)] < total) ++warm[static_cast<size_t>(s)], raised = true;
      BRAID_CONFIG_CHECK(raised, "--schedule interleaved: no deadlock-free order for --pp ", P,
                         " --micro-batches ", m, " --virtual-stages ", v, " (", d.what(),
                         "); use a multiple of ", P, " micro-batches");
    }
  }
}

double bubble(int P, int m, int v) { return (P - 1.0) / (static_cast<double>(v) * m + P - 1.0); }

std::string assumption(int P, int m, int) { return m % P != 0 ? "the formula assumes P divides m" : ""; }

// v = 2 and 4 where they split the layers evenly and P divides m (the formula's case).
std::vector<int> planner_chunks(int P, int64_t m, int64_t L) {
  std::vector<int> out;
  if (P < 2) return out;
  for (int v : {2, 4})
    if (L % (int64_t{P} * v) == 0 && m % P == 0) out.push_back(v);
  return out;
}

}  // namespace

ScheduleDef interleaved_schedule() {
  return {.name = "interleaved",
          .description = "v chunks per rank, Megatron-LM's interleaved 1F1B (Narayanan et al. SC21)",
          .chunks = 0, .validate = validate, .build = build, .bubble = bubble, .bubble_text = "(P-1)/(vm+P-1)",
          .assumption = assumption, .planner_chunks = planner_chunks};
}

}  // namespace braid::parallel
