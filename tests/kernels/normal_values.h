// Reproducible test data for the kernel tests: element i of stream `stream`
// is scale * N(0, 1) from braid's counter-based generator (core/rng.h), so a
// tensor's values do not depend on the order the test draws them in.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/core/rng.h"

namespace testing_data {

inline std::vector<float> normal_values(size_t n, uint64_t seed, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * braid::rand_normal(seed, stream, i);
  return v;
}

}  // namespace testing_data
