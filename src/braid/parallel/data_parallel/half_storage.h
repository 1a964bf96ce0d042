// Where a half-precision model's state lives under DDP and ZeRO-1 (mixed
// precision, Micikevicius et al. 2018): the compute parameters in the compute
// dtype (bf16 or fp16), the gradients in the reduce dtype (f32 by default, or
// the compute dtype), the f32 master weights of the elements this rank
// updates, and two f32 working units the kernels read and write. It is the
// model's UnitStorage: forward widens a unit's parameters to f32 when it takes
// them; backward accumulates into the f32 gradient buffer in place (the
// default), or into an f32 unit buffer that is added into the half-precision
// gradient buffer when the unit is done (--reduce-dtype bf16 / fp16). The
// gradient buckets reduce that buffer.
//
// Per rank (b = 2 bytes, g = 4 or 2 bytes, Ψ elements, S elements owned):
// compute params Ψb, grads Ψg, master 4S (S = Ψ under DDP, about Ψ/N under
// ZeRO-1); working units (comm): (unit 0 + the largest other unit) f32 for the
// widened parameters, and as much again for unit gradients when g = 2.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/memory.h"
#include "braid/model/unit_storage.h"
#include "braid/parallel/data_parallel/grad_sync.h"

namespace braid::parallel {

class HalfPrecisionStorage final : public model::UnitStorage {
 public:
  /// Bytes per MemCategory for a layout with unit boundaries `bounds` (L + 3
  /// offsets, model::unit_bounds), compute dtype `compute`, gradient dtype
  /// `reduce` and `state_elems` master elements; what the constructor allocates.
  static std::array<size_t, kNumMemCategories> plan(const std::vector<size_t>& bounds, DType compute, DType reduce,
                                                    size_t state_elems);

  /// Throws ConfigError when `compute` is f32 (the model then holds its own
  /// buffers) or `reduce` is neither f32 nor `compute`.
  HalfPrecisionStorage(std::vector<size_t> bounds, DType compute, DType reduce, size_t state_elems,
                       MemoryLedger* ledger);

  // ---- model::UnitStorage ----
  /// Unit u's parameters widened to f32; valid until release_params(u). One
  /// unit besides unit 0 at a time (GPT's access order); throws braid::Error otherwise.
  const float* acquire_params(int u) override;
  void release_params(int u) override;
  /// Unit u's part of compute(), the copy acquire_params widens.
  const void* compute_params(int u) override { return compute_.as<char>() + unit_begin(u) * esz_; }
  bool has_compute_params() const override { return true; }
  /// acquire_params widens only the rest of each unit.
  void set_compute_only(const std::vector<std::pair<size_t, size_t>>& ranges) override;
  /// Unit u's f32 gradient (unit 0 and one other at a time): its part of
  /// grads() itself when grad_dtype() is f32, else a zeroed unit buffer.
  float* acquire_grads(int u) override;
  bool accumulates_in_place() const override { return grad_dtype_ == DType::f32; }
  /// With a half-precision grad_dtype(), adds unit u's f32 gradient into
  /// grads() (rounded); then reports the unit's flat range to the ready hook
  /// when one is set.
  void grads_ready(int u) override;

  /// The hook grads_ready reports finished ranges to (empty: none), in
  /// decreasing contiguous order as backward finishes units.
  void set_ready_hook(GradReadyHook h) { ready_ = std::move(h); }
  /// Zeroes the gradient accumulator (a new step).
  void zero_grads();
  /// The forward copies changed (optimizer step, load): the widened units are stale.
  void params_changed();

  DType dtype() const { return dtype_; }
  DType grad_dtype() const { return grad_dtype_; }
  size_t num_params() const { return bounds_.back(); }
  int num_units() const { return static_cast<int>(bounds_.size()) - 1; }
  size_t unit_begin(int u) const { return bounds_[static_cast<size_t>(u)]; }
  void* compute() { return compute_.data(); }
  void* grads() { return grads_.data(); }
  /// The gradient buffer itself, for an engine that moves it into shared memory
  /// before the first step.
  Buffer& grad_buffer() { return grads_; }
  const void* grads() const { return grads_.data(); }
  /// f32 master weights, indexed by the optimizer-state offset.
  float* master() { return master_.as<float>(); }
  /// Test hook (fp16): the next grads_ready() puts +inf into its unit's first gradient.
  void inject_inf_once() { inject_inf_ = true; }

 private:
  // A unit widened to (or accumulating in) f32.
  struct Work {
    Buffer data;
    int unit = -1;
    bool valid = false, in_use = false;
  };
  Work& param_slot(int u) { return u == 0 ? params_[0] : params_[1]; }
  Work& grad_slot(int u) { return u == 0 ? grad_work_[0] : grad_work_[1]; }
  size_t unit_len(int u) const { return bounds_[static_cast<size_t>(u) + 1] - bounds_[static_cast<size_t>(u)]; }

  std::vector<size_t> bounds_;
  // Per unit, the (begin, end) flat ranges acquire_params widens (default: the unit).
  std::vector<std::vector<std::pair<size_t, size_t>>> widen_;
  DType dtype_, grad_dtype_;
  size_t esz_;
  Buffer compute_, grads_, master_;
  Work params_[2], grad_work_[2];  // [0] unit 0, [1] any other unit
  GradReadyHook ready_;
  bool inject_inf_ = false;
};

}  // namespace braid::parallel
