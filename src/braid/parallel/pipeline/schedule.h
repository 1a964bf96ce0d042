// Pipeline schedules as data (docs/ARCHITECTURE.md): a builder returns each
// rank's list of actions, a checker verifies the tables alone (every action
// once, forward before backward, no deadlock) and measures the bubble by
// simulating the executor on them, and PipelineExecutor (executor.h) runs them.
// Activations move to the next virtual stage after a forward and gradients to
// the previous one after a backward (point-to-point, tagged by micro-batch and
// chunk), so the tables hold compute actions only and their order fixes the
// order of every send and receive.
//
// Virtual stages: with v model chunks per rank and P ranks there are Q = v*P
// virtual stages; virtual stage q = chunk*P + rank, i.e. rank s holds chunks
// s, s+P, s+2P, ... of the layer sequence (Megatron-LM's interleaved layout).
// With v = 1 a virtual stage is a rank ("stage").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

/// backward: the full backward (input and weight gradients). The zero-bubble
/// split (Qi et al. 2024): backward_input ("B") computes the input gradient
/// only and sends it upstream; backward_weight ("W") computes the weight
/// gradient only and communicates nothing. A (chunk, micro-batch) runs either
/// backward or the pair backward_input then backward_weight.
enum class PipeOp : uint8_t { forward, backward, backward_input, backward_weight };

struct PipeAction {
  PipeOp op;
  int micro;
  int chunk = 0;  // model chunk on this rank, 0..v-1 (virtual stage chunk*P + rank)
};
using StageProgram = std::vector<PipeAction>;

enum class ScheduleKind : uint8_t { naive, gpipe, one_f_one_b, interleaved, zb_h1 };

/// Gradient send buffers of the executor (a ring): the checker and the
/// interleaved builder verify the tables with this many.
constexpr int kGradSendBuffers = 2;

/// "naive" | "gpipe" | "1f1b" | "interleaved" | "zb-h1"; throws ConfigError
/// naming the choices for anything else.
ScheduleKind parse_schedule(const std::string& s);
const char* schedule_name(ScheduleKind k);

/// Per-rank programs for P ranks, m micro-batches and v model chunks per rank:
/// - naive: one micro-batch at a time through the whole pipeline (forward on
///   every stage, then backward), the next only after it: model parallelism
///   without pipelining;
/// - gpipe (Huang et al. 2019): all m forwards, then all m backwards;
/// - 1f1b (Narayanan et al. 2021, PipeDream-Flush): stage s runs
///   min(P-1-s, m) warm-up forwards, then alternates one forward and one
///   backward, then the remaining backwards; at most P - s micro-batches are
///   alive on stage s;
/// - interleaved (Narayanan et al. SC21, "Efficient Large-Scale Language Model
///   Training on GPU Clusters Using Megatron-LM", sec. 2.2.2; the order of
///   Megatron-LM's forward_backward_pipelining_with_interleaving): forwards in
///   groups of P micro-batches (the last group smaller when P does not divide
///   m), each group through chunk 0, then chunk 1, ..., v-1; backwards in the
///   same groups, chunks v-1 down to 0. Rank s runs
///   min((P-s-1)*2 + (v-1)*P, m*v) warm-up forwards, then one forward one
///   backward, then the remaining backwards. Megatron requires P | m; here
///   any m >= 1 works: where the simulated executor (check_schedule, 2
///   gradient send buffers) deadlocks with uneven groups, the warm-up of each
///   rank blocked in a backward is raised by one and the table checked again,
///   until it passes (all forwards first cannot deadlock). With P | m the
///   formula is used as is. Needs P >= 2 and v >= 2;
/// - zb-h1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024,
///   sec. 3, ZB-H1): stage s runs w = min(P-1-s, m) warm-up forwards, then for
///   i = 0..m-1: forward(w+i) if w+i < m, backward_input(i), and
///   backward_weight(i-s) if i >= s; then the remaining backward_weights. The
///   weight gradients of stage s lag its input gradients by s micro-batches
///   and fill 1F1B's cool-down bubble; at most P micro-batches are alive on
///   any stage (1F1B's stage-0 peak).
/// naive, gpipe, 1f1b and zb-h1 need v = 1. Throws ConfigError naming the
/// values and the fix for P < 1, m < 1, v < 1 or a kind that does not take v.
std::vector<StageProgram> build_schedule(ScheduleKind kind, int P, int m, int v = 1);

/// What the simulation of a schedule found.
struct ScheduleStats {
  int virtual_stages = 1;              // v: chunks per rank
  double makespan = 0;                 // time units (see check_schedule for the costs)
  double bubble = 0;                   // 1 - busy / (P * makespan)
  double send_wait = 0;                // time ranks spent blocked on sends (rendezvous), summed over ranks
  std::vector<int> peak_in_flight;     // per rank: most micro-batches alive, summed over chunks
  std::vector<std::vector<int>> peak_in_flight_chunk;  // [rank][chunk]: most micro-batches alive on that chunk
  struct Span {
    PipeAction action;
    double start, end;
  };
  std::vector<std::vector<Span>> spans;  // per rank, compute only, in execution order
};

/// Checks the tables and simulates the executor on them.
///
/// Table checks (braid::Error naming the rank, op, chunk and micro-batch):
/// every (chunk, micro) of every rank runs forward once and either backward
/// once or backward_input then backward_weight once each (not both forms);
/// chunk in [0, v), micro in [0, m); no backward before its forward, no
/// backward_weight before its backward_input.
///
/// Costs are for a whole stage's layers, split evenly over its chunks: a
/// forward on one chunk costs f_cost / v, a full backward b_cost / v,
/// backward_input and backward_weight b_cost / (2v) each.
///
/// The executor runs each rank's list in order, with rendezvous sends (the
/// worst case MPI allows: a send completes only once its receiver has posted
/// the matching receive; transfers take no time):
/// - forward (c, j) on virtual stage q: for q > 0 a blocking receive of the
///   activation from the rank of q-1, posted on reaching the action; compute;
///   for q < Q-1 a non-blocking send of the output (waited at the end of the
///   backward of (c, j): it is sent out of the micro-batch's activations);
/// - backward / backward_input (c, j): for q < Q-1 a blocking receive of the
///   gradient from the rank of q+1; compute; for q > 0 the gradient goes into
///   send buffer k = (this rank's gradient sends so far) mod grad_send_buffers:
///   wait until the previous send out of buffer k completed, then send it
///   non-blocking; then wait for the activation send of (c, j);
/// - backward_weight: compute only;
/// - the sends still open are waited for at the end of the step.
/// Alive micro-batches (peak_in_flight) depend on program order only: from the
/// forward to the backward, or to the backward_weight when split.
/// Throws braid::Error when no rank can advance (deadlock), naming each stuck
/// rank, its action and what it waits for (a receive or a send buffer).
ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m, int v = 1,
                             double f_cost = 1.0, double b_cost = 2.0,
                             int grad_send_buffers = kGradSendBuffers);

/// Bubble fraction in theory, with backward = 2 x forward where it matters:
/// - gpipe, 1f1b: (P-1) / (m+P-1) (Narayanan et al. 2021, sec. 2.2.1);
/// - naive: (P-1) / P (one stage busy at a time);
/// - interleaved: the bubble time shrinks by v (Narayanan et al. SC21, sec.
///   2.2.2): (P-1)/v idle per m compute, i.e. (P-1) / (v*m + P-1);
/// - zb-h1 with T_F = T_B = T_W: the bubble time is (P-1)(T_F + T_B - T_W)
///   (Qi et al. 2024, sec. 3), i.e. (P-1) / (3m + P-1) for m >= P, about a
///   third of 1F1B's.
/// The simulation matches these exactly for gpipe and 1f1b (any m), zb-h1
/// (m >= P) and interleaved (P | m); see the tests for the other cases.
double theoretical_bubble(ScheduleKind kind, int P, int m, int v = 1);
/// "" when theoretical_bubble(kind, P, m, v) is what the schedule reaches with
/// the unit costs, else the assumption it makes that (P, m) breaks
/// ("the formula assumes P divides m" for interleaved, "... m >= P" for zb-h1).
std::string theory_assumption(ScheduleKind kind, int P, int m);

/// Text table: one row per rank, one column per time unit of the cheapest
/// action. Cells: op letter, micro-batch, and ".c" for chunk c when v > 1:
/// "F3" forward, "B3" full backward, "b3" backward_input, "W3"
/// backward_weight, "F3.1" forward of micro-batch 3 on chunk 1, "." idle.
std::string draw_schedule(const ScheduleStats& s, int P);
/// The same as an SVG picture: forwards in blue (darker per chunk), full
/// backward and backward_input in green (backward_input lighter), backward_weight in orange.
std::string schedule_svg(const ScheduleStats& s, int P, const std::string& title);

}  // namespace braid::parallel
