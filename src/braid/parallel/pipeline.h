// Pipeline schedules as data (DESIGN.md habit 4): a builder returns each
// stage's list of actions, a checker verifies the tables alone (every action
// once, forward before backward, no deadlock) and measures the bubble by
// simulating them, and the trainer's executor runs them. Activations move to
// the next stage after a forward and gradients to the previous stage after a
// backward (point-to-point, tagged by micro-batch), so the tables hold compute
// actions only and their order fixes the order of every send and receive.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

enum class PipeOp : uint8_t { forward, backward };

struct PipeAction {
  PipeOp op;
  int micro;
};
using StageProgram = std::vector<PipeAction>;

enum class ScheduleKind : uint8_t { naive, gpipe, one_f_one_b };

/// "naive" | "gpipe" | "1f1b"; throws ConfigError naming the choices (and that
/// interleaved and zb-h1 are not available yet).
ScheduleKind parse_schedule(const std::string& s);
const char* schedule_name(ScheduleKind k);

/// Per-stage programs for P stages and m micro-batches:
/// - naive: one micro-batch at a time through the whole pipeline (forward on
///   every stage, then backward), the next only after it: model parallelism
///   without pipelining;
/// - gpipe (Huang et al. 2019): all m forwards, then all m backwards;
/// - 1f1b (Narayanan et al. 2021, PipeDream-Flush): stage s runs
///   min(P-1-s, m) warm-up forwards, then alternates one forward and one
///   backward, then the remaining backwards; at most P - s micro-batches are
///   alive on stage s.
/// Throws ConfigError for P < 1 or m < 1.
std::vector<StageProgram> build_schedule(ScheduleKind kind, int P, int m);

/// What the simulation of a schedule found.
struct ScheduleStats {
  double makespan = 0;                 // time units, forward = f_cost, backward = b_cost
  double bubble = 0;                   // 1 - busy / (P * makespan)
  std::vector<int> peak_in_flight;     // per stage: most micro-batches between forward and backward
  struct Span {
    PipeAction action;
    double start, end;
  };
  std::vector<std::vector<Span>> spans;  // per stage, in execution order
};

/// Checks a table and simulates it: each stage runs its list in order; a
/// forward of micro-batch j on stage s > 0 waits for the forward of j on s-1,
/// a backward waits for the forward of j on the same stage and (s < P-1) the
/// backward of j on s+1. Throws braid::Error naming the problem when a stage
/// runs an action twice or never, a backward precedes its forward, or no stage
/// can proceed (deadlock: a receive that no send will ever match).
ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m,
                             double f_cost = 1.0, double b_cost = 2.0);

/// Bubble fraction of GPipe and 1F1B in theory: (P-1) / (m+P-1)
/// (Narayanan et al. 2021, sec. 2.2).
double theoretical_bubble(int P, int m);

/// Text table: one row per stage, one column per time unit ("F3", "B3", ".").
std::string draw_schedule(const ScheduleStats& s, int P);
/// The same as an SVG picture (forwards blue, backwards green).
std::string schedule_svg(const ScheduleStats& s, int P, const std::string& title);

}  // namespace braid::parallel
