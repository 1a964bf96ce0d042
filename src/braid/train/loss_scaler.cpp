#include "braid/train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "braid/core/error.h"

namespace braid::train {

void LossScaleOptions::validate() const {
  BRAID_CONFIG_CHECK(std::isfinite(initial_scale) && initial_scale > 0.0f,
                     "--loss-scale ", initial_scale,
                     " must be finite and > 0; use a power of two such as 65536 (2^16)");
  BRAID_CONFIG_CHECK(std::isfinite(growth_factor) && growth_factor > 1.0f,
                     "--loss-scale-growth ", growth_factor,
                     " must be finite and > 1 (the scale grows after clean steps); use 2");
  BRAID_CONFIG_CHECK(backoff_factor > 0.0f && backoff_factor < 1.0f,
                     "--loss-scale-backoff ", backoff_factor,
                     " must be in (0, 1) (the scale shrinks on overflow); use 0.5");
  BRAID_CONFIG_CHECK(growth_interval >= 1, "--loss-scale-window ", growth_interval,
                     " must be >= 1 (clean steps before the scale grows); use 1000");
  BRAID_CONFIG_CHECK(hysteresis >= 1, "--loss-scale-hysteresis ", hysteresis,
                     " must be >= 1 (overflows tolerated before backing off); use 1 or 2");
  BRAID_CONFIG_CHECK(std::isfinite(min_scale) && min_scale > 0.0f,
                     "--min-loss-scale ", min_scale, " must be finite and > 0; use 1");
  BRAID_CONFIG_CHECK(min_scale <= initial_scale, "--min-loss-scale ", min_scale,
                     " exceeds --loss-scale ", initial_scale,
                     "; use a --min-loss-scale <= --loss-scale (e.g. 1) or a larger --loss-scale");
}

DynamicLossScaler::DynamicLossScaler(LossScaleOptions opts, bool enabled)
    : opts_(opts), enabled_(enabled) {
  opts_.validate();
  state_ = {opts_.initial_scale, 0, opts_.hysteresis};
}

float DynamicLossScaler::inv_scale() const { return float(1.0 / double(scale())); }

bool DynamicLossScaler::update(bool found_inf) {
  ++steps_;
  if (!enabled_) return false;
  if (found_inf) {
    ++skipped_;
    state_.growth_tracker = 0;
    // Clamped at 0 (Megatron lets it go negative); "<= 0" there is "== 0" here.
    state_.hysteresis_left = std::max<int64_t>(state_.hysteresis_left - 1, 0);
    if (state_.hysteresis_left == 0)
      state_.scale = std::max(state_.scale * opts_.backoff_factor, opts_.min_scale);
    return true;
  }
  if (++state_.growth_tracker == opts_.growth_interval) {
    state_.growth_tracker = 0;
    state_.hysteresis_left = opts_.hysteresis;
    // Why the guard: an inf scale would turn every loss into inf and every later
    // step into a skip. Unreachable in practice (2^16 * 2^112 takes 112 intervals).
    const float grown = state_.scale * opts_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;
  }
  return false;
}

void DynamicLossScaler::set_state(const LossScalerState& s) {
  BRAID_CONFIG_CHECK(std::isfinite(s.scale) && s.scale > 0.0f, "loss scaler state: scale=",
                     s.scale, " must be finite and > 0; the checkpoint is corrupt");
  BRAID_CONFIG_CHECK(s.growth_tracker >= 0 && s.growth_tracker < opts_.growth_interval,
                     "loss scaler state: growth_tracker=", s.growth_tracker,
                     " is outside [0, growth_interval=", opts_.growth_interval,
                     "); resume with the growth_interval the checkpoint was written with");
  BRAID_CONFIG_CHECK(s.hysteresis_left >= 0 && s.hysteresis_left <= opts_.hysteresis,
                     "loss scaler state: hysteresis_left=", s.hysteresis_left,
                     " is outside [0, hysteresis=", opts_.hysteresis,
                     "]; resume with the hysteresis the checkpoint was written with");
  state_ = s;
}

bool found_inf_all_ranks(comm::Communicator& comm, bool local_found_inf) {
  // One f32 rather than a byte: every backend reduces f32, and max of {0, 1}
  // is exact, so all ranks get the identical answer.
  float flag = local_found_inf ? 1.0f : 0.0f;
  comm.all_reduce(&flag, &flag, 1, DType::f32, comm::ReduceOp::max);
  return flag != 0.0f;
}

}  // namespace braid::train
