// The schedule checker: table checks and a simulation of the executor on the
// tables (rendezvous sends, the gradient send ring), which finds deadlocks and
// measures the makespan, the bubble and the micro-batches alive.
#pragma once
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

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

/// check_schedule's error when no rank can advance.
struct ScheduleDeadlock : Error {
  ScheduleDeadlock(const std::string& message, std::vector<int> blocked)
      : Error(message), blocked_in_backward(std::move(blocked)) {}
  std::vector<int> blocked_in_backward;  // ranks blocked in a backward (a receive or a send buffer)
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
/// When q and q+1 are on the same rank the executor hands the buffer over
/// locally; the simulation treats it as the same send, received when the
/// rank reaches the consuming action (a gradient occupies its ring buffer
/// until then, as in the executor).
/// Alive micro-batches (peak_in_flight) depend on program order only: from the
/// forward to the backward, or to the backward_weight when split.
/// Throws ScheduleDeadlock when no rank can advance, naming each stuck rank,
/// its action and what it waits for (a receive or a send buffer).
ScheduleStats check_schedule(const std::vector<StageProgram>& programs, const StageMap& map, int m,
                             double f_cost = 1.0, double b_cost = 2.0, int grad_send_buffers = kGradSendBuffers);
/// The same with the interleaved placement q = chunk*P + rank.
ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m, int v = 1,
                             double f_cost = 1.0, double b_cost = 2.0,
                             int grad_send_buffers = kGradSendBuffers);

}  // namespace braid::parallel
