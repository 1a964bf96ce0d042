// Picking the next token from a row of logits: top-k (Fan et al. 2018,
// "Hierarchical Neural Story Generation") with a softmax temperature.
#pragma once
#include <cstdint>

#include "braid/core/rng.h"

namespace braid::train {

/// Token id in [0, V) drawn from the k = clamp(top_k, 1, V) largest of
/// logits[0, V) with probabilities softmax(logit / temperature) (temperature
/// floored at 1e-4); ties keep the lower id first. Deterministic given `rng`.
int32_t sample_token(const float* logits, int64_t V, int64_t top_k, float temperature, Rng& rng);

}  // namespace braid::train
