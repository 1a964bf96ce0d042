// Learning-rate schedule: linear warm-up then cosine decay to min_lr
// (Loshchilov & Hutter 2017, SGDR eq. 5, without restarts).
#pragma once
#include <cmath>
#include <cstdint>

namespace braid::train {

struct LrSchedule {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  /// lr at 0-based `step`: max_lr*(step+1)/warmup during warm-up, then
  /// min_lr + 0.5*(max_lr-min_lr)*(1+cos(pi*progress)), progress in [0,1].
  float at(int64_t step) const {
    if (step < warmup_steps) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
    const int64_t decay = total_steps - warmup_steps;
    if (decay <= 1) return max_lr;
    double p = static_cast<double>(step - warmup_steps) / static_cast<double>(decay - 1);
    if (p > 1.0) p = 1.0;
    return static_cast<float>(min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * p)));
  }
};

}  // namespace braid::train
