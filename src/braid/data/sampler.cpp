#include "braid/data/sampler.h"

#include "braid/core/error.h"
#include "braid/core/rng.h"

namespace braid::data {

namespace {
constexpr uint64_t kSamplerStream = 0x5a3b1e;
}

DistributedSampler::DistributedSampler(size_t n_tokens, int64_t T, int64_t global_batch,
                                       uint64_t seed, int dp_rank, int dp_size)
    : T_(T), global_batch_(global_batch), seed_(seed), dp_rank_(dp_rank), dp_size_(dp_size) {
  BRAID_CONFIG_CHECK(n_tokens > static_cast<size_t>(T) + 1, "the token stream holds ", n_tokens,
                     " tokens, fewer than one sequence of --seq-len ", T,
                     " + 1; use a shorter --seq-len or more data");
  BRAID_CONFIG_CHECK(dp_size > 0 && global_batch % dp_size == 0, "global batch ", global_batch,
                     " is not divisible by dp=", dp_size);
  n_windows_ = n_tokens - static_cast<size_t>(T);
}

size_t DistributedSampler::offset(int64_t step, int64_t j) const {
  const uint64_t idx = static_cast<uint64_t>(step) * static_cast<uint64_t>(global_batch_) +
                       static_cast<uint64_t>(j);
  return static_cast<size_t>(rand_bits(seed_, kSamplerStream, idx) % n_windows_);
}

std::vector<size_t> DistributedSampler::rank_offsets(int64_t step) const {
  const int64_t b = local_batch();
  std::vector<size_t> out(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) out[static_cast<size_t>(i)] = offset(step, dp_rank_ * b + i);
  return out;
}

void gather_batch(TokenView stream, const size_t* offsets, int64_t B, int64_t T, int32_t* tokens,
                  int32_t* targets) {
  for (int64_t b = 0; b < B; ++b) {
    const size_t s = offsets[b];
    for (int64_t t = 0; t < T; ++t) {
      tokens[b * T + t] = static_cast<int32_t>(stream[s + size_t(t)]);
      targets[b * T + t] = static_cast<int32_t>(stream[s + size_t(t) + 1]);
    }
  }
}

}  // namespace braid::data
