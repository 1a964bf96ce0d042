// Picking the next token from a row of logits: top-k (Fan et al. 2018,
// "Hierarchical Neural Story Generation") with a softmax temperature.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "braid/core/rng.h"

namespace braid::train {

/// Token id in [0, V) drawn from the k = clamp(top_k, 1, V) largest of
/// logits[0, V) with probabilities softmax(logit / temperature) (temperature
/// floored at 1e-4); ties keep the lower id first. Deterministic given `rng`.
int32_t sample_token(const float* logits, int64_t V, int64_t top_k, float temperature, Rng& rng);

/// How generate() picks tokens and what context each forward gets.
struct Generation {
  int64_t vocab = 0;        // V: tokens are drawn from logits[0, V)
  int64_t max_context = 0;  // the newest tokens a forward sees (at most the model's seq_len)
  int64_t multiple = 1;     // a forward's length is rounded up to this (sequence parallelism)
  int64_t top_k = 0;
  float temperature = 1;
};

/// Fills `row` with the logits of position len − 1 after a forward over
/// context[0, T) (T >= len; positions from len on are filler that causal
/// attention keeps from the ones before). The same row on every rank.
using LastLogits = std::function<void(const std::vector<int32_t>& context, int64_t len, float* row)>;

/// `prompt` followed by `n` tokens, each drawn by sample_token from the
/// logits `last_logits` gives for the newest g.max_context tokens, padded with
/// copies of the last one to a multiple of g.multiple. `row_size` (>= V):
/// the floats last_logits writes. Deterministic given `rng`.
std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t n, const Generation& g, size_t row_size,
                              const LastLogits& last_logits, Rng& rng);

}  // namespace braid::train
