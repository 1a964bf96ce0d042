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

}  // namespace braid::train
