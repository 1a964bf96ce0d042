// Timing helpers shared by the kernel benchmarks (bench-attention,
// bench-block-parts, bench-step): medians of repeated wall-clock times.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace braid::cli {

/// The median of v (the upper one of an even count); v non-empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Milliseconds since t0 on the steady clock.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Median milliseconds of fwd() and of bwd() over `reps` alternated runs,
/// after one untimed run of each (primitives created, pages touched).
template <typename F, typename G>
std::pair<double, double> time_forward_backward(int64_t reps, F&& fwd, G&& bwd) {
  fwd(), bwd();
  std::vector<double> f, b;
  for (int64_t r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fwd();
    f.push_back(ms_since(t0));
    t0 = std::chrono::steady_clock::now();
    bwd();
    b.push_back(ms_since(t0));
  }
  return {median(f), median(b)};
}

}  // namespace braid::cli
