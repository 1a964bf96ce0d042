// The data-parallel seam: how one step's gradients reach the ranks that update
// them and how the updated parameters get back (after Megatron-LM's gradient
// buffer, which all-reduces or reduce-scatters by a flag). The trainer runs
// every strand through it:
//
//   begin_step(step)
//   per backward:        model.backward(scale, backward_hook(last))
//   pipeline only:       reduce_accumulated(tied group) after the last backward
//   loss = finish(loss)  gradients final on their owners, loss averaged over DP
//   the optimizer over owned() (grad(), master()), then after_update(scalars)
//
// Implementations (docs/ARCHITECTURE.md): BucketedSync (DDP and ZeRO-1, any
// precision), ShardedSync (ZeRO-2/3, FSDP, HSDP, over the sharding engine) and
// ParameterServerSync (rank 0 serves).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/dtype.h"

namespace braid::model {
class GPT;
class UnitStorage;
}  // namespace braid::model

namespace braid::parallel {

/// A piece of the flat parameter buffer whose update this rank owns: flat
/// [offset, offset + len) <-> optimizer state [state, state + len).
struct OwnedRange {
  size_t offset, len, state;
};

/// What a step reports besides the gradients (a parameter server's workers
/// receive these from the server).
struct StepScalars {
  int64_t step = 0;
  float loss = 0, grad_norm = 0, lr = 0;
};

/// Elements per piece when a compute copy is loaded in pieces (4 MiB of f32).
inline constexpr size_t kLoadPieceElems = size_t{1} << 20;

/// Called by backward with flat element ranges [begin, end) whose gradients
/// are final, in decreasing contiguous order.
using GradReadyHook = std::function<void(size_t begin, size_t end)>;

/// Fills dst (len f32) with flat elements [offset, offset + len) of this
/// rank's parameter layout from a checkpoint (alignment gaps: 0).
using FlatReader = std::function<void(size_t offset, size_t len, float* dst)>;

class GradSync {
 public:
  virtual ~GradSync() = default;

  /// The storage the model takes its parameters and gradients from, or null
  /// when the model holds them itself (f32 flat buffers). Called before attach().
  virtual model::UnitStorage* storage() { return nullptr; }
  /// Binds to the model built over storage(); called once, before any step.
  virtual void attach(model::GPT& model) = 0;
  /// Sets the master weights and compute copies to GPT's initialisation for
  /// `seed` (each rank only what it holds); after attach().
  virtual void init_params(model::GPT& model, uint64_t seed);

  /// Starts step `step`: resets readiness and the gradient accumulators.
  virtual void begin_step(int64_t step) = 0;
  /// Before a backward: `last` is true for the backward that ends this rank's
  /// accumulation. Returns the hook to pass to backward (may be empty).
  virtual GradReadyHook backward_hook(bool last) = 0;
  /// Pipeline: after this stage's last backward (every backward ran with
  /// last = false), reduces everything accumulated over the DP group and sums
  /// the tied embedding's gradient (unit 0) over `tied` when given.
  virtual void reduce_accumulated(comm::Communicator* tied) = 0;
  /// Waits for the gradient reductions: afterwards the owned gradients hold the
  /// DP average. Returns the loss averaged over the DP group (collective).
  virtual float finish(float local_loss) = 0;
  /// After the optimizer updated the owned master weights: brings every rank's
  /// compute parameters up to date (all-gather, cast, or a pull from the server).
  virtual void after_update(StepScalars& s) = 0;

  /// True when this rank runs forward and backward (not a parameter server).
  virtual bool computes() const { return true; }
  /// For the start-up log: how the data-parallel collectives move bytes
  /// (transport_line, group_buffer.h); empty when there are none to describe.
  virtual std::string transport() const { return {}; }
  /// The pieces this rank updates (increasing offsets) and the elements of its
  /// optimizer state.
  virtual const std::vector<OwnedRange>& owned() const = 0;
  virtual size_t state_elems() const = 0;
  /// Whether this rank's owned gradients count in the global norm (each
  /// element once in the world), and the group the counts are summed over
  /// (null: this rank alone holds every gradient).
  virtual bool counts_in_norm() const = 0;
  virtual comm::Communicator* norm_group() = 0;
  /// Gradient of owned range r in grad_dtype(); f32 master weights of r.
  virtual const void* grad(const OwnedRange& r) const = 0;
  virtual DType grad_dtype() const = 0;
  virtual float* master(const OwnedRange& r) = 0;
  /// Where the optimizer writes owned range r's updated parameters rounded to
  /// bf16, the compute copy of a bf16 run (after_update then leaves it be);
  /// nullptr: after_update brings the compute parameters up to date itself.
  virtual uint16_t* bf16_compute(const OwnedRange& /*r*/) { return nullptr; }
  /// True if an owned gradient element is inf or NaN (this rank only).
  bool local_grads_nonfinite() const;

  // ---- checkpoints (every rank calls these together) ----
  /// The full f32 master weights (num_params): a pointer into the model, or
  /// `scratch` filled. Collective over the group the parameters are sharded on.
  virtual const float* full_params(std::vector<float>& scratch) = 0;
  /// full (num_params) = per-rank optimizer state (state_elems, indexed by
  /// OwnedRange::state) placed at its flat offsets; zero where nothing owns.
  virtual void assemble_state(const float* state, float* full) = 0;
  /// Sets master weights and compute copies from a checkpoint: reads what this
  /// rank holds (the master weights of its owned ranges and its compute copy)
  /// through `read`, a bounded piece at a time. No communication.
  virtual void load_params(const FlatReader& read) = 0;
  /// Unit u's f32 parameters as this rank computes with them (sharded:
  /// gathered, collective over the shard group) until release_unit_params(u).
  virtual const float* acquire_unit_params(int u) = 0;
  virtual void release_unit_params(int u) {}
  /// FNV-1a hash of the compute parameters (collective when sharded).
  virtual uint64_t hash_params() = 0;
  /// True when a forward needs every rank of the group (parameters sharded).
  virtual bool params_sharded() const { return false; }
  /// Waits on communication become spans in `sink` (null: none); the collectives
  /// themselves are traced by their communicators.
  virtual void set_span_sink(SpanSink* sink) {}
  /// Test hook (fp16): the next reduction sees +inf in this rank's gradient.
  virtual void inject_inf_once() {}
};

/// The part shared by the syncs whose model holds its own f32 flat buffers
/// (BucketedSync, ParameterServerSync): master weights are the parameters.
class FlatBufferSync : public GradSync {
 public:
  void attach(model::GPT& model) override { model_ = &model; }
  const void* grad(const OwnedRange& r) const override;
  DType grad_dtype() const override { return DType::f32; }
  float* master(const OwnedRange& r) override;
  const float* full_params(std::vector<float>& scratch) override;
  /// Places this rank's state at the owned offsets, zero elsewhere (no communication).
  void assemble_state(const float* state, float* full) override;
  void load_params(const FlatReader& read) override;
  const float* acquire_unit_params(int u) override;
  uint64_t hash_params() override;

 protected:
  model::GPT* model_ = nullptr;
};

}  // namespace braid::parallel
