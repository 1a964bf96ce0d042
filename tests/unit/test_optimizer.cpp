// The optimizer's streaming passes: the gradient norm's sum of squares against
// a long-double reference in every gradient dtype, the same bits for any thread
// count, and the zero fill's exact extent (AdamW's arithmetic is tested in
// tests/kernels/test_kernels_fd.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/adamw.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/train/optimizer.h"

namespace {

using braid::DType;

// n values of dtype t (as raw bytes), drawn from N(0, 1e-2) and rounded to t.
std::vector<uint16_t> draw(DType t, size_t n, uint64_t seed) {
  std::vector<uint16_t> raw(n * braid::dtype_size(t) / 2);
  for (size_t i = 0; i < n; ++i) braid::store_from_f32(raw.data(), i, t, 1e-2f * braid::rand_normal(seed, 0, i));
  return raw;
}

long double reference(const void* g, DType t, size_t n, float mult) {
  long double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const long double v = static_cast<long double>(braid::load_as_f32(g, i, t) * mult);
    s += v * v;
  }
  return s;
}

// Sizes around the 16384-element blocks and the 256-block passes.
const size_t kSizes[] = {0, 1, 17, 16383, 16384, 16385, 3 * 16384 + 5, 256 * 16384 + 7};

}  // namespace

TEST(GradSumsq, MatchesLongDoubleInEveryDtype) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (size_t n : kSizes) {
      const auto g = draw(t, n, 7 + n);
      for (float mult : {1.0f, 0.37f}) {
        const long double want = reference(g.data(), t, n, mult);
        const double got = braid::kernels::grad_sumsq(g.data(), t, n, mult);
        // Double sums of n positive terms: relative error below n * 2^-53 (Higham,
        // Accuracy and Stability of Numerical Algorithms, eq. 4.4).
        EXPECT_LE(std::fabs(static_cast<long double>(got) - want), want * 1e-12L + 1e-300L)
            << braid::dtype_name(t) << " n=" << n << " mult=" << mult;
      }
    }
  }
}

TEST(GradSumsq, SameBitsForAnyThreadCount) {
  const size_t n = 256 * 16384 + 12345;
  const auto g = draw(DType::f32, n, 3);
  const int before = braid::omp_threads();
  braid::set_omp_threads(1);
  const double one = braid::kernels::grad_sumsq(g.data(), DType::f32, n, 0.5f);
  for (int threads : {2, 3, 5}) {
    braid::set_omp_threads(threads);
    EXPECT_EQ(braid::kernels::grad_sumsq(g.data(), DType::f32, n, 0.5f), one) << threads << " threads";
  }
  braid::set_omp_threads(before);
}

TEST(FillZero, ZeroesExactlyTheRange) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4095), size_t(1) << 18, (size_t(1) << 20) + 3}) {
    std::vector<unsigned char> buf(bytes + 64, 0xAB);
    braid::kernels::fill_zero(buf.data() + 32, bytes);
    for (size_t i = 0; i < buf.size(); ++i) {
      const bool inside = i >= 32 && i < 32 + bytes;
      ASSERT_EQ(buf[i], inside ? 0 : 0xAB) << "byte " << i << " of a fill of " << bytes;
    }
  }
}

// Not a test: the streaming rates of the optimizer's passes beside a memcpy of
// the same buffers in the same run (bench/speed_table.sh, part "optimizer").
// Bytes moved per element: the copy 8 (read + write), the norm's pass 4, AdamW 28
// (read p, g, m, v; write p, m, v), the zero fill 4.
TEST(GradSumsq, DISABLED_StreamingRates) {
  const size_t n = size_t(1) << 25;
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  auto median_s = [](auto&& f) {
    std::vector<double> t;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  volatile double sink = 0;
  // The ceiling: a copy spread over the team like the passes (one thread's memcpy reaches less).
  const double copy = median_s([&] {
    const int64_t piece = int64_t(1) << 16, N = int64_t(n);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < N; o += piece)
      std::memcpy(m.data() + o, g.data() + o, size_t(std::min(piece, N - o)) * sizeof(float));
  });
  const double norm = median_s([&] { sink = sink + braid::kernels::grad_sumsq(g.data(), DType::f32, n, 1.0f); });
  int64_t step = 0;
  const double adamw = median_s([&] {
    braid::kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
  });
  const double zero = median_s([&] { braid::kernels::fill_zero(v.data(), n * sizeof(float)); });
  const double gb = double(n) * 1e-9;
  std::printf("optimizer passes over %zu f32 elements, %d threads (median of 7; GB/s = 1e9 B/s moved):\n", n,
              braid::omp_threads());
  std::printf("  copy         %7.1f ms %6.1f GB/s\n", copy * 1e3, 8 * gb / copy);
  for (auto [name, s, bytes] : {std::tuple{"grad norm", norm, 4}, {"AdamW", adamw, 28}, {"zero fill", zero, 4}})
    std::printf("  %-12s %7.1f ms %6.1f GB/s  %.2fx the copy's rate\n", name, s * 1e3, bytes * gb / s,
                (bytes * gb / s) / (8 * gb / copy));
}
