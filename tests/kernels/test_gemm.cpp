// kernels::gemm against a naive double-precision product, and the oneDNN
// throughput figure (DISABLED_: run with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/matmul.h"

using braid::kernels::gemm;

namespace {

std::vector<float> randvec(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = braid::rand_normal(7, stream, i);
  return v;
}

void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                bool with_bias, int64_t batch) {
  auto A = randvec(size_t(batch * M * K), 1);
  auto B = randvec(size_t(batch * K * N), 2);
  auto C = randvec(size_t(batch * M * N), 3);
  auto bias = randvec(size_t(N), 4);
  std::vector<double> ref(C.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double a = ta ? A[size_t(b * M * K + k * M + i)] : A[size_t(b * M * K + i * K + k)];
          double bb = tb ? B[size_t(b * K * N + j * K + k)] : B[size_t(b * K * N + k * N + j)];
          s += a * bb;
        }
        const size_t c = size_t(b * M * N + i * N + j);
        ref[c] = alpha * s + (beta != 0 ? beta * double(C[c]) : 0.0) +
                 (with_bias ? double(bias[size_t(j)]) : 0.0);
      }
  if (beta == 0) std::fill(C.begin(), C.end(), NAN);  // beta 0 must not read C
  gemm(ta, tb, M, N, K, alpha, A.data(), B.data(), beta, C.data(),
       with_bias ? bias.data() : nullptr, batch);
  double max_err = 0;
  for (size_t i = 0; i < C.size(); ++i) {
    const double err = std::abs(C[i] - ref[i]);
    max_err = std::max(max_err, err);
    // fp32 accumulation over K terms of O(1) products: error ~ sqrt(K) * 6e-8 * O(1).
    ASSERT_NEAR(C[i], ref[i], 1e-5 * std::sqrt(double(K) + 1) * 4)
        << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K << " i=" << i;
  }
}

}  // namespace

TEST(Gemm, MatchesNaiveAllLayouts) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t batch : {1, 3}) {
        check_gemm(ta, tb, 7, 5, 3, 1.0f, 0.0f, false, batch);
        check_gemm(ta, tb, 65, 33, 129, 0.5f, 1.0f, false, batch);
        check_gemm(ta, tb, 17, 40, 64, 1.0f, 0.3f, false, batch);
        check_gemm(ta, tb, 17, 40, 64, 1.0f, 0.0f, true, batch);
        check_gemm(ta, tb, 9, 11, 13, 1.0f, 1.0f, true, batch);
      }
}

TEST(Gemm, ZeroSizesAndCache) {
  std::vector<float> C = {1, 2, 3, 4};
  gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, C.data());  // K = 0: C = beta C
  EXPECT_FLOAT_EQ(C[3], 2.0f);
  gemm(false, false, 0, 2, 3, 1.0f, nullptr, nullptr, 0.0f, C.data());  // no-op
  auto A = randvec(64, 1), B = randvec(64, 2);
  std::vector<float> D(64);
  gemm(false, false, 8, 8, 8, 1.0f, A.data(), B.data(), 0.0f, D.data());
  const size_t n = braid::kernels::gemm_cache_size();
  gemm(false, false, 8, 8, 8, 1.0f, A.data(), B.data(), 0.0f, D.data());
  EXPECT_EQ(braid::kernels::gemm_cache_size(), n) << "same shape must reuse the primitive";
  EXPECT_THROW(gemm(false, false, -1, 2, 3, 1.0f, A.data(), B.data(), 0.0f, D.data()),
               braid::Error);
}

// fp32 GEMM GFLOP/s at the GPT-2 MLP shapes (BT=256, C=768, 4C=3072).
TEST(Gemm, DISABLED_Throughput) {
  const int64_t BT = 256, C = 768, H = 3072;
  auto X = randvec(size_t(BT * H), 1), W = randvec(size_t(H * C), 2);
  std::vector<float> Y(size_t(BT * H));
  struct Case { const char* name; bool ta, tb; int64_t M, N, K; float beta; };
  const Case cases[] = {
      {"fwd  (256x768)@(3072x768)^T", false, true, BT, H, C, 0.0f},
      {"dinp (256x3072)@(3072x768)  ", false, false, BT, C, H, 0.0f},
      {"dW   (256x3072)^T@(256x768) ", true, false, H, C, BT, 1.0f},
      {"sq   768x3072x768           ", false, false, C, H, C, 0.0f},
  };
  std::printf("oneDNN fp32 gemm, %d threads\n", braid::omp_threads());
  for (const Case& c : cases) {
    std::vector<float> A(size_t(c.M * c.K)), Bm(size_t(c.K * c.N)), Cm(size_t(c.M * c.N));
    for (size_t i = 0; i < A.size(); ++i) A[i] = X[i % X.size()];
    for (size_t i = 0; i < Bm.size(); ++i) Bm[i] = W[i % W.size()];
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), Bm.data(), c.beta, Cm.data());
    const int reps = 20;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), Bm.data(), c.beta, Cm.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %s  %.1f GFLOP/s\n", c.name, 2.0 * c.M * c.N * c.K * reps / s * 1e-9);
  }
}
