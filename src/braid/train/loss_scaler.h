// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed
// Precision Training", sec. 3.2): the loss is multiplied by `scale` before the
// backward pass so small gradients do not flush to zero in f16; gradients are
// divided by it before the optimizer. A step whose gradients overflowed (inf/NaN
// anywhere, on any rank) is skipped and the scale backs off; after
// growth_interval clean steps it grows again.
//
// The state machine is Megatron-LM's DynamicGradScaler
// (megatron/core/optimizer/grad_scaler.py), which DeepSpeed's DynamicLossScaler
// (deepspeed/runtime/fp16/loss_scaler.py, delayed_shift = hysteresis) matches
// step for step; with hysteresis = 1 it is PyTorch's torch.amp.GradScaler.
// bf16 has f32's exponent range and needs no scaling: construct with
// enabled = false.
#pragma once
#include <cstdint>

#include "braid/comm/communicator.h"

namespace braid::train {

/// Defaults are PyTorch GradScaler's (2^16, x2 every 1000 clean steps, x0.5 on
/// overflow) with Megatron's min_scale and hysteresis knobs.
struct LossScaleOptions {
  float initial_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;      // scale *= growth_factor after growth_interval clean steps
  float backoff_factor = 0.5f;     // scale *= backoff_factor once hysteresis overflows are used up
  int64_t growth_interval = 1000;  // clean steps in a row before growing
  int64_t hysteresis = 1;          // overflows tolerated before backing off (1 = back off on each)
  float min_scale = 1.0f;          // the scale never backs off below this

  /// Throws ConfigError naming the bad value and the fix when any of these fails:
  /// initial_scale > 0, growth_factor > 1, 0 < backoff_factor < 1,
  /// growth_interval >= 1, hysteresis >= 1, 0 < min_scale <= initial_scale
  /// (all floats finite).
  void validate() const;
};

/// The scaler's resumable state, for checkpoints.
struct LossScalerState {
  float scale;              // current loss scale, finite and > 0
  int64_t growth_tracker;   // clean steps since the last overflow or growth, [0, growth_interval)
  int64_t hysteresis_left;  // overflows left before the next backoff, [0, hysteresis]
};

/// Decides per step whether to apply or skip the update and adapts the scale.
/// Every rank must feed update() the same found_inf (use found_inf_all_ranks),
/// so all ranks keep identical scales and skip the same steps.
///
/// update(found_inf):
///   found_inf: skip the step; growth_tracker = 0; hysteresis_left -= 1 (not
///     below 0); if hysteresis_left is now 0, scale = max(scale * backoff_factor,
///     min_scale). hysteresis_left is NOT refilled by the backoff (as in Megatron
///     and DeepSpeed): once used up, every further overflow backs off again until
///     the next growth.
///   clean: growth_tracker += 1; when it reaches growth_interval: scale *=
///     growth_factor (kept unchanged if that would overflow f32),
///     growth_tracker = 0, hysteresis_left = hysteresis.
class DynamicLossScaler {
 public:
  /// enabled = false (f32 / bf16 runs): scale() is 1, update() never skips and
  /// the state never changes. Throws ConfigError from opts.validate() either way.
  explicit DynamicLossScaler(LossScaleOptions opts = {}, bool enabled = true);

  bool enabled() const { return enabled_; }
  const LossScaleOptions& options() const { return opts_; }

  /// The factor to multiply the loss by (1 when disabled).
  float scale() const { return enabled_ ? state_.scale : 1.0f; }
  /// 1 / scale(), rounded once from double (as Megatron's inv_scale), for
  /// unscaling gradients. Exact for the default power-of-two factors.
  float inv_scale() const;

  /// Records one optimizer step. found_inf: whether any gradient on any rank
  /// was inf/NaN. Returns true when the step must be skipped: the caller then
  /// applies no parameter or optimizer-state update. Always false when disabled.
  bool update(bool found_inf);

  /// Steps seen by update() and how many of them were skipped, since
  /// construction (not part of the checkpoint state).
  int64_t steps() const { return steps_; }
  int64_t skipped_steps() const { return skipped_; }

  LossScalerState state() const { return state_; }
  /// Restores a state from state(). Throws ConfigError when it is out of range
  /// for these options (e.g. a checkpoint written with a larger growth_interval).
  void set_state(const LossScalerState& s);

 private:
  LossScaleOptions opts_;
  bool enabled_;
  LossScalerState state_;
  int64_t steps_ = 0;
  int64_t skipped_ = 0;
};

/// True on every rank when local_found_inf is true on any rank of comm: an
/// all-reduce (max) of one f32 flag. Collective: must be called by every rank
/// of comm, in the same order as its other collectives. Use the communicator
/// spanning every rank that holds a piece of the gradients (DP x TP x PP), so
/// all of them skip the same steps. Throws braid::Error on transport failure.
bool found_inf_all_ranks(comm::Communicator& comm, bool local_found_inf);

}  // namespace braid::train
