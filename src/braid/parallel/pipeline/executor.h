// The pipeline executor: runs one rank's program (a list of actions from the
// schedule builder, pipeline.h) for one optimizer step against a StageModel.
// Without a pipeline the program is the trivial one-stage one (forward and
// backward of each micro-batch in turn), so every training step runs here.
//
// A rank holds one model chunk, or several (their virtual stages: the
// schedule's StageMap, by default q = chunk * P + rank). A forward on a later virtual stage
// first receives its input activation from the previous one; a backward (or
// zero-bubble input pass) first receives the output gradient from the next;
// sends are non-blocking: activations leave from their slot, gradients from a
// ring of kGradSendBuffers buffers. Tags are (virtual stage, micro-batch,
// direction), so the checked order of the tables is the order of every send
// and receive. Between two virtual stages on the same rank nothing goes
// through the communicator: the consuming forward copies the activation out of
// the producing chunk's slot, and a gradient waits in its ring buffer until
// the consuming backward copies it (as a send whose receive is that backward,
// which the checker models).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"
#include "braid/parallel/pipeline/check.h"

namespace braid::parallel {

/// What the executor drives on one rank: its model chunks, each with a number
/// of activation slots (micro-batches alive at once).
class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual int num_chunks() const = 0;
  virtual int64_t chunk_slots(int chunk) const = 0;
  /// Selects activation slot `slot` of chunk `chunk` for the next pass.
  virtual void set_slot(int64_t slot, int chunk) = 0;
  /// Where a chunk other than the first virtual stage receives its input
  /// activation, where its output leaves from, and where d(output) arrives
  /// and d(input) leaves from; boundary_bytes() each.
  virtual void* stage_input() = 0;
  virtual const void* stage_output() = 0;
  virtual void* boundary_grad() = 0;
  virtual size_t boundary_bytes() const = 0;
  /// Forward of micro-batch `micro` through the selected chunk; first / last:
  /// the chunk is the first / last virtual stage (it reads the tokens / the
  /// targets). Returns the micro-batch's mean loss on the last, else 0.
  virtual float forward(int micro, bool first, bool last) = 0;
  /// A backward pass of `micro` on the selected chunk: op is backward,
  /// backward_input or backward_weight; `last`: the chunk's last pass of this
  /// step that produces those gradients (sums over a group happen then).
  virtual void backward(int micro, PipeOp op, bool last) = 0;
};

/// Span callback for tracing: (what, index or -1, category, t0, t1 in
/// microseconds of the steady clock, chunk or -1).
using SpanFn = std::function<void(const char*, int64_t, const char*, double, double, int)>;

class PipelineExecutor {
 public:
  /// program: this rank's actions for map.P() stages, m micro-batches,
  /// map.v() chunks placed by `map`. pp: the pipeline group (rank = stage;
  /// null when P = 1). Allocates the gradient send ring (comm memory in
  /// `ledger`) on a rank that sends gradients (stage > 0, or v > 1) of
  /// `boundary_bytes` per buffer.
  PipelineExecutor(StageProgram program, const StageMap& map, int m, comm::Communicator* pp,
                   size_t boundary_bytes, MemoryLedger* ledger);
  /// The same with the interleaved placement q = chunk * P + rank.
  PipelineExecutor(StageProgram program, int P, int m, int v, comm::Communicator* pp, size_t boundary_bytes,
                   MemoryLedger* ledger);

  struct Result {
    double loss_sum = 0;  // sum of the micro-batches' losses (last virtual stage, else 0)
    double compute_s = 0; // seconds inside forward and backward passes
  };
  /// Runs the program once. Throws braid::Error when the program asks for a
  /// slot that is not free (a schedule that keeps too many micro-batches alive).
  Result run(StageModel& model, const SpanFn& span = {});

  /// Forward only (evaluation, sampling): micro-batch `micro` of `micros`
  /// through every chunk of this rank, slot 0 of each, activations of
  /// model.boundary_bytes() passed on with blocking sends. Returns the loss on
  /// the last virtual stage, else 0.
  float forward_only(StageModel& model, int micro, int micros);

  /// Bytes of the gradient send ring on stage `stage` (0 when it sends no gradient).
  static size_t grad_ring_bytes(int P, int v, int stage, size_t boundary_bytes);

 private:
  struct Pass;  // the state of one run
  void run_forward(Pass& s, const PipeAction& a);
  void run_backward(Pass& s, const PipeAction& a, size_t i);
  void receive_activation(Pass& s, int q, int micro, int64_t slot, int chunk);
  void receive_gradient(Pass& s, int q, int micro);
  void send_gradient(Pass& s, int q, int micro);

  StageProgram program_;
  StageMap map_;
  int P_, m_, v_, rank_;
  comm::Communicator* pp_;
  size_t bytes_;
  Buffer ring_;  // kGradSendBuffers x boundary_bytes
  std::vector<size_t> last_b_, last_w_;  // per chunk: index of its last input / weight gradient pass
};

}  // namespace braid::parallel
