// Deterministic data order: the global batch of each step is a pure function
// of (seed, step), and each DP rank reads a disjoint, contiguous slice of it, so
// the union over ranks is exactly the single-rank batch for any dp degree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/data/token_view.h"

namespace braid::data {

/// Samples windows of T+1 tokens (inputs and next-token targets) at random
/// offsets of a token stream.
class DistributedSampler {
 public:
  /// n_tokens: stream length; T: sequence length; global_batch: sequences per
  /// step; dp_rank / dp_size: this rank's slice. Throws ConfigError when the
  /// stream is shorter than T+1 tokens or global_batch % dp_size != 0.
  DistributedSampler(size_t n_tokens, int64_t T, int64_t global_batch, uint64_t seed, int dp_rank,
                     int dp_size);
  /// Token offset of sequence j (0 <= j < global_batch) of step `step`.
  size_t offset(int64_t step, int64_t j) const;
  /// Offsets of this rank's sequences for `step` (global_batch / dp_size of them,
  /// sequences [dp_rank*b, (dp_rank+1)*b) of the global batch).
  std::vector<size_t> rank_offsets(int64_t step) const;
  int64_t local_batch() const { return global_batch_ / dp_size_; }

 private:
  size_t n_windows_;
  int64_t T_, global_batch_;
  uint64_t seed_;
  int dp_rank_, dp_size_;
};

/// Copies sequences at `offsets` of `stream` (ids of either width) into
/// tokens/targets (each (B, T), int32): targets are the inputs shifted by one token.
void gather_batch(TokenView stream, const size_t* offsets, int64_t B, int64_t T, int32_t* tokens,
                  int32_t* targets);

}  // namespace braid::data
