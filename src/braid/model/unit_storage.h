// Where a model's parameters and gradients live while forward and backward
// use them, unit by unit: the seam a sharding engine (ZeRO-2/3, FSDP) plugs into.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace braid::model {

/// Where the parameters and gradients of one FSDP unit live while forward and
/// backward use them; lets a sharding engine (ZeRO-2/3, FSDP) gather parameters
/// just in time and take gradients away unit by unit. Units: 0 = embeddings
/// (wte, wpe), 1..L = transformer blocks, L+1 = final LayerNorm; unit u covers
/// the flat elements [unit_bounds()[u], unit_bounds()[u + 1]) (param_layout.h).
///
/// Access order of one training step (the engine may prefetch by it):
/// forward 0, 1, ..., L, L+1, 0 (the tied head); backward 0 (head), L+1, L, ..., 1,
/// then the encoder's gradient into unit 0 without its parameters (an embedding
/// lookup's backward needs only the token ids).
class UnitStorage {
 public:
  virtual ~UnitStorage() = default;
  /// f32 parameters of unit u: flat element o is at p[o - unit_begin(u)]. Valid
  /// until release_params(u).
  virtual const float* acquire_params(int u) = 0;
  virtual void release_params(int u) = 0;
  /// Unit u's parameters in the compute dtype (bf16 / fp16), indexed as
  /// acquire_params' (element o at byte (o - unit_begin(u)) * 2): the values the
  /// f32 ones were widened from, valid while unit u is acquired. nullptr when
  /// the storage keeps no such copy (the default; f32 storages).
  virtual const void* compute_params(int /*u*/) { return nullptr; }
  /// True when compute_params hands out a copy (never nullptr).
  virtual bool has_compute_params() const { return false; }
  /// Flat element ranges [begin, end) the model reads only through
  /// compute_params (its matmul weights, when it multiplies half-precision
  /// operands): acquire_params may leave them stale in its f32 copy. A storage
  /// may ignore it (the default).
  virtual void set_compute_only(const std::vector<std::pair<size_t, size_t>>& /*ranges*/) {}
  /// f32 gradient buffer of unit u (same indexing) that backward accumulates
  /// into (+=); valid until grads_ready(u). Unit 0 stays acquired through the
  /// whole backward (the tied head and the encoder both write wte's gradient).
  virtual float* acquire_grads(int u) = 0;
  /// Backward has finished unit u's gradient for this micro-batch.
  virtual void grads_ready(int u) = 0;
  /// True when acquire_grads hands out the step's accumulator itself (it holds
  /// the earlier micro-batches' sums), false when it hands out a zeroed buffer
  /// per micro-batch. Decides when the model sums gradients that are partial
  /// over TP (GPT::set_tp_grad_sync).
  virtual bool accumulates_in_place() const { return false; }
};

/// Calls f(lo, hi) for each maximal piece [lo, hi) of [a, e) outside the
/// sorted flat ranges `skip` (a storage's set_compute_only ranges), in order.
template <class F>
void for_each_gap(const std::vector<std::pair<size_t, size_t>>& skip, size_t a, size_t e, F&& f) {
  size_t at = a;
  for (const auto& [lo, hi] : skip) {
    if (hi <= at) continue;
    if (lo >= e) break;
    if (lo > at) f(at, lo);
    at = std::max(at, hi);
  }
  if (at < e) f(at, e);
}

}  // namespace braid::model
