#include "braid/train/sampling.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace braid::train {

int32_t sample_token(const float* logits, int64_t V, int64_t top_k, float temperature, Rng& rng) {
  std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) cand[static_cast<size_t>(v)] = {logits[v], static_cast<int32_t>(v)};
  const int64_t k = std::clamp<int64_t>(top_k, 1, V);
  std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
  const float temp = std::max(temperature, 1e-4f);
  double total = 0;
  std::vector<double> p(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    p[static_cast<size_t>(j)] = std::exp((cand[static_cast<size_t>(j)].first - cand[0].first) / temp);
    total += p[static_cast<size_t>(j)];
  }
  double u = rng.uniform() * total;
  for (int64_t j = 0; j < k; ++j) {
    u -= p[static_cast<size_t>(j)];
    if (u <= 0) return cand[static_cast<size_t>(j)].second;
  }
  return cand[static_cast<size_t>(k - 1)].second;
}

std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t n, const Generation& g, size_t row_size,
                              const LastLogits& last_logits, Rng& rng) {
  std::vector<int32_t> seq = prompt, context;
  std::vector<float> row(row_size);
  const int64_t P = g.multiple;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(seq.size()), g.max_context);
    context.assign(seq.end() - len, seq.end());
    context.resize(static_cast<size_t>((len + P - 1) / P * P), context.back());
    last_logits(context, len, row.data());
    seq.push_back(sample_token(row.data(), g.vocab, g.top_k, g.temperature, rng));
  }
  return seq;
}

}  // namespace braid::train
