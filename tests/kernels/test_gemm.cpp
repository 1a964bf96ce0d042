// kernels::gemm against a naive double-precision product, and the oneDNN
// throughput figure (DISABLED_: run with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "kernels/normal_values.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/matmul.h"

using braid::kernels::gemm;

using testing_data::normal_values;

namespace {

void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                bool with_bias, int64_t batch) {
  auto A = normal_values(size_t(batch * M * K), 7, 1);
  auto B = normal_values(size_t(batch * K * N), 7, 2);
  auto C = normal_values(size_t(batch * M * N), 7, 3);
  auto bias = normal_values(size_t(N), 7, 4);
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
  auto A = normal_values(64, 7, 1), B = normal_values(64, 7, 2);
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
  auto X = normal_values(size_t(BT * H), 7, 1), W = normal_values(size_t(H * C), 7, 2);
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

namespace {

// (rows, cols) row-major naive product helpers in double for the backward checks.
std::vector<double> naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& A,
                          const std::vector<float>& B) {
  std::vector<double> C(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double a = ta ? A[size_t(k * M + i)] : A[size_t(i * K + k)];
      for (int64_t j = 0; j < N; ++j) C[size_t(i * N + j)] += a * (tb ? B[size_t(j * K + k)] : B[size_t(k * N + j)]);
    }
  return C;
}

// x rounded in place to t; returns its storage in t.
std::vector<uint16_t> round_to_half(std::vector<float>& x, braid::DType t) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    braid::store_from_f32(h.data(), i, t, x[i]);
    x[i] = braid::load_as_f32(h.data(), i, t);
  }
  return h;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, int64_t K, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-5 * std::sqrt(double(K) + 1) * 4) << what << " i=" << i;
}

}  // namespace

// The transposed layouts of matmul_backward (the weight's copy in blocks of
// 4096 rows from 1024 rows; dinp computed transposed from 512 rows, and below
// for >= 2048 columns or >= 8192 outputs; inputs of >= 2048 columns) against the
// naive products and the plain layout.
TEST(Gemm, MatmulBackwardWithScratchMatchesNaive) {
  struct Case { int64_t BT, C, OC; };
  for (const Case c : {Case{512, 2048, 8}, Case{520, 16, 4100}, Case{64, 2050, 5}, Case{1024, 16, 4100},
                       Case{1030, 2050, 3}, Case{37, 24, 8200}, Case{511, 2048, 3}, Case{1024, 2048, 0}}) {
    const size_t need = braid::kernels::matmul_backward_scratch_floats(c.BT, c.C, c.OC);
    ASSERT_GT(need, 0u) << "case must take a transposed path";
    auto dout = normal_values(size_t(c.BT * c.OC), 7, 11), inp = normal_values(size_t(c.BT * c.C), 7, 12),
         w = normal_values(size_t(c.OC * c.C), 7, 13), dw0 = normal_values(size_t(c.OC * c.C), 7, 14);
    std::vector<float> scratch(need, NAN), dinp(size_t(c.BT * c.C), NAN), dw = dw0, db(size_t(c.OC), 0.f);
    braid::kernels::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), c.BT,
                                    c.C, c.OC, scratch.data());
    expect_close(dinp, naive(false, false, c.BT, c.C, c.OC, dout, w), c.OC, "dinp");
    auto ref_dw = naive(true, false, c.OC, c.C, c.BT, dout, inp);
    for (size_t i = 0; i < ref_dw.size(); ++i) ref_dw[i] += dw0[i];
    expect_close(dw, ref_dw, c.BT, "dweight");
    // Without scratch: the plain layout, the same values to rounding.
    std::vector<float> dinp2(dinp.size()), dw2 = dw0, db2(db.size(), 0.f);
    braid::kernels::matmul_backward(dinp2.data(), dw2.data(), db2.data(), dout.data(), inp.data(), w.data(), c.BT,
                                    c.C, c.OC);
    expect_close(dinp2, naive(false, false, c.BT, c.C, c.OC, dout, w), c.OC, "plain dinp");
    expect_close(dw2, ref_dw, c.BT, "plain dweight");
    EXPECT_EQ(db, db2) << "the bias gradient does not depend on the layout";
  }
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(256, 768, 768), 0u);
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(4096, 768, 768), 0u);
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(600, 768, 3072), size_t(600 * 768));
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(1024, 768, 3072), size_t(3072 * 768));
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(256, 768, 3072), 0u);
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(256, 3072, 768), size_t(256 * 3072));
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(256, 768, 50304), size_t(256 * 768));
  EXPECT_EQ(braid::kernels::matmul_backward_scratch_floats(1024, 768, 50304), size_t(4096 * 768));
}

// bf16 x bf16 -> f32: the products of bf16 values are exact in f32, so the
// result equals the f32 product of the same (widened) values to f32 summation
// error; where oneDNN has no matmul for the type here (fp16 without
// AVX512-FP16), gemm_typed widens the operands and runs the f32 product
// itself, so the result is bitwise gemm's on the widened values.
TEST(Gemm, HalfOperandsMatchF32OnTheSameValues) {
  for (braid::DType t : {braid::DType::bf16, braid::DType::f16}) {
    const int64_t M = 33, N = 40, K = 129;
    auto A = normal_values(size_t(M * K), 7, 21), B = normal_values(size_t(N * K), 7, 22);
    const auto Ah = round_to_half(A, t), Bh = round_to_half(B, t);
    std::vector<float> C(size_t(M * N), NAN), C32(C.size(), NAN);
    braid::kernels::gemm_typed(false, true, M, N, K, 1.f, Ah.data(), Bh.data(), t, 0.f, C.data());
    expect_close(C, naive(false, true, M, N, K, A, B), K, braid::dtype_name(t));
    if (braid::kernels::half_matmul_supported(t)) continue;
    gemm(false, true, M, N, K, 1.f, A.data(), B.data(), 0.f, C32.data());
    EXPECT_EQ(C, C32) << braid::dtype_name(t) << " widened";
  }
  EXPECT_TRUE(braid::kernels::half_matmul_supported(braid::DType::f32));
}

// Half operands too large to widen at once (an operand of more than 2^22
// elements, or a batch of them): where oneDNN has no matmul for the type (fp16
// here without AVX512-FP16) the product runs in tiles of A's rows, B's columns
// and K, into C in place; every layout, with bias, alpha and beta, against the
// naive product of the widened values.
TEST(Gemm, HalfOperandsLargerThanOneTileMatchNaive) {
  struct Case { int64_t M, N, K, batch; };
  for (braid::DType t : {braid::DType::f16})
    for (const Case c : {Case{3, 70001, 64, 1}, Case{70001, 3, 64, 1}, Case{2, 33000, 130, 1}, Case{300, 5, 20000, 1}, Case{64, 40, 100001, 1},
                         Case{3, 40000, 64, 2}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const int64_t M = c.M, N = c.N, K = c.K, nb = c.batch;
          auto A = normal_values(size_t(nb * M * K), 7, 41), B = normal_values(size_t(nb * K * N), 7, 42);
          auto C = normal_values(size_t(nb * M * N), 7, 43), bias = normal_values(size_t(N), 7, 44);
          const auto Ah = round_to_half(A, t), Bh = round_to_half(B, t);
          const float alpha = 1.0f, beta = 0.5f;
          std::vector<double> ref(C.size());
          for (int64_t b = 0; b < nb; ++b) {
            std::vector<float> Ab(A.begin() + b * M * K, A.begin() + (b + 1) * M * K),
                Bb(B.begin() + b * K * N, B.begin() + (b + 1) * K * N);
            const auto p = naive(ta, tb, M, N, K, Ab, Bb);
            for (size_t i = 0; i < p.size(); ++i) {
              const size_t o = size_t(b * M * N) + i;
              ref[o] = alpha * p[i] + beta * double(C[o]) + double(bias[i % size_t(N)]);
            }
          }
          braid::kernels::gemm_typed(ta, tb, M, N, K, alpha, Ah.data(), Bh.data(), t, beta, C.data(), bias.data(),
                                     nb);
          expect_close(C, ref, K, braid::dtype_name(t));
        }
}

// The linear layer on half-precision operands (multiplied natively, or widened
// where oneDNN cannot) against the naive products of the same (widened) values: out = inp W^T + b, dinp = dout W, dweight +=
// dout^T inp, dbias += the column sum of dout (in row order: bitwise the f32
// sum of the widened values).
TEST(Gemm, LinearLayerOnHalfOperandsMatchesNaive) {
  for (braid::DType t : {braid::DType::bf16, braid::DType::f16}) {
    const int64_t BT = 37, C = 48, OC = 70;
    auto inp = normal_values(size_t(BT * C), 7, 31), w = normal_values(size_t(OC * C), 7, 32),
         dout = normal_values(size_t(BT * OC), 7, 33), bias = normal_values(size_t(OC), 7, 34),
         dw0 = normal_values(size_t(OC * C), 7, 35);
    const auto inp_h = round_to_half(inp, t), w_h = round_to_half(w, t), dout_h = round_to_half(dout, t);
    std::vector<float> out(size_t(BT * OC), NAN);
    braid::kernels::matmul_forward_typed(out.data(), inp_h.data(), w_h.data(), t, bias.data(), BT, C, OC);
    auto ref = naive(false, true, BT, OC, C, inp, w);
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += bias[i % size_t(OC)];
    expect_close(out, ref, C, "forward");
    std::vector<float> dinp(size_t(BT * C), NAN), dw = dw0, db(size_t(OC), 0.5f), db_ref = db;
    braid::kernels::matmul_backward_typed(dinp.data(), dw.data(), db.data(), dout_h.data(), inp_h.data(),
                                          w_h.data(), t, BT, C, OC);
    expect_close(dinp, naive(false, false, BT, C, OC, dout, w), OC, "dinp");
    auto ref_dw = naive(true, false, OC, C, BT, dout, inp);
    for (size_t i = 0; i < ref_dw.size(); ++i) ref_dw[i] += dw0[i];
    expect_close(dw, ref_dw, BT, "dweight");
    for (int64_t r = 0; r < BT; ++r)
      for (int64_t o = 0; o < OC; ++o) db_ref[size_t(o)] += dout[size_t(r * OC + o)];
    EXPECT_EQ(db, db_ref) << braid::dtype_name(t);
    // Weight pass only (the zero-bubble split): dinp and dbias untouched.
    std::vector<float> dw2 = dw0;
    braid::kernels::matmul_backward_typed(nullptr, dw2.data(), nullptr, dout_h.data(), inp_h.data(), nullptr, t, BT,
                                          C, OC);
    EXPECT_EQ(dw2, dw) << "the weight pass alone adds the same dweight";
  }
}

namespace {
// matmul_backward at GPT-2's shapes (BT token rows, C = 768), with and without
// its scratch (the transposed layouts), alternated; prints the medians.
void backward_layouts(int64_t BT) {
  const int64_t C = 768;
  struct Layer { const char* name; int64_t in, out; };
  const Layer layers[] = {{"attn.c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"mlp.c_fc", C, 4 * C},
                          {"mlp.c_proj", 4 * C, C},  {"lm_head", C, 50304}};
  std::printf("matmul_backward (dinp + dweight), BT=%lld, %d threads: median ms of 7, plain | with scratch\n",
              (long long)BT, braid::omp_threads());
  double total[2] = {0, 0};
  for (const Layer& l : layers) {
    auto dout = normal_values(size_t(BT * l.out), 7, 1), inp = normal_values(size_t(BT * l.in), 7, 2),
         w = normal_values(size_t(l.out * l.in), 7, 3);
    std::vector<float> dinp(size_t(BT * l.in)), dw(size_t(l.out * l.in), 0.f);
    std::vector<float> scratch(braid::kernels::matmul_backward_scratch_floats(BT, l.in, l.out));
    std::vector<double> ms[2];
    for (int rep = 0; rep < 8; ++rep)
      for (int v = 0; v < 2; ++v) {
        const auto t0 = std::chrono::steady_clock::now();
        braid::kernels::matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), BT, l.in,
                                        l.out, v ? scratch.data() : nullptr);
        if (rep > 0) ms[v].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    double med[2];
    for (int v = 0; v < 2; ++v) {
      std::sort(ms[v].begin(), ms[v].end());
      med[v] = ms[v][ms[v].size() / 2];
      total[v] += med[v] * (l.out == 50304 ? 1 : 12);
    }
    const double gflop = 4.0 * double(BT) * double(l.in) * double(l.out) / 1e9;
    std::printf("  %-12s %6.1f ms (%5.1f GFLOP/s) | %6.1f ms (%5.1f GFLOP/s)  x%.2f\n", l.name, med[0],
                gflop / med[0] * 1e3, med[1], gflop / med[1] * 1e3, med[0] / med[1]);
  }
  std::printf("  gpt2 backward matmuls (12 blocks + head): %.0f ms | %.0f ms  x%.2f\n", total[0], total[1],
              total[0] / total[1]);
}
}  // namespace

// A figure for docs/BENCHMARKS.md, not a test (DISABLED_): at BT = 1024 (B=8,
// T=128) the wide layers copy their weight, at 512 (B=4, T=128) they compute
// dinp transposed, at 256 (B=4, T=64) mlp.c_proj and the head do.
TEST(Gemm, DISABLED_BackwardLayouts) {
  for (const int64_t BT : {int64_t(1024), int64_t(512), int64_t(256)}) backward_layouts(BT);
}

// bf16 / fp16 products in every layout, with bias, alpha and beta, at the
// shapes a small GPT runs (its layers' forward and both gradients, batched
// attention) and two wide ones: the products of half values are exact in f32,
// so each element differs from the exact product of the rounded values by f32
// summation error alone, in any order of the sums: |err| <= c eps sum_k
// |a_k b_k| (eps = 2^-24), c growing like sqrt(K) for sums of mixed signs
// (measured c <= 2.2 with oneDNN's avx512_core_bf16 kernels, <= 1.9 with its
// AMX ones, K <= 1024). A wrong operand, layout or tile errs by ~1/eps.
TEST(Gemm, HalfOperandsAllLayoutsWithinF32SummationError) {
  struct Case { int64_t M, N, K, batch; float alpha; };
  const Case cases[] = {{32, 192, 64, 1, 1.f}, {16, 16, 16, 8, 0.25f}, {16, 16, 16, 8, 1.f}, {32, 64, 64, 1, 1.f},
                        {32, 256, 64, 1, 1.f}, {32, 64, 256, 1, 1.f}, {32, 128, 64, 1, 1.f}, {64, 192, 32, 1, 1.f},
                        {256, 64, 32, 1, 1.f}, {33, 40, 129, 1, 1.f}, {32, 768, 512, 1, 1.f}, {32, 512, 768, 1, 1.f}};
  for (braid::DType t : {braid::DType::bf16, braid::DType::f16})
    for (const Case c : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int variant = 0; variant < 3; ++variant) {  // plain, bias, beta = 1 (accumulate)
            const bool with_bias = variant == 1;
            if (with_bias && c.alpha != 1.f) continue;  // gemm takes a bias with alpha 1 only
            const float beta = variant == 2 ? 1.f : 0.f;
            const int64_t M = c.M, N = c.N, K = c.K, nb = c.batch;
            auto A = normal_values(size_t(nb * M * K), 7, 51), B = normal_values(size_t(nb * K * N), 7, 52);
            auto C = normal_values(size_t(nb * M * N), 7, 53), bias = normal_values(size_t(N), 7, 54);
            const auto Ah = round_to_half(A, t), Bh = round_to_half(B, t);
            const std::vector<float> C0 = C;
            braid::kernels::gemm_typed(ta, tb, M, N, K, c.alpha, Ah.data(), Bh.data(), t, beta, C.data(),
                                       with_bias ? bias.data() : nullptr, nb);
            double worst = 0;
            for (int64_t b = 0; b < nb; ++b)
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                  double s = 0, mag = 0;
                  for (int64_t k = 0; k < K; ++k) {
                    const double a = ta ? A[size_t(b * M * K + k * M + i)] : A[size_t(b * M * K + i * K + k)];
                    const double bb = tb ? B[size_t(b * K * N + j * K + k)] : B[size_t(b * K * N + k * N + j)];
                    s += a * bb, mag += std::abs(a * bb);
                  }
                  const size_t o = size_t(b * M * N + i * N + j);
                  const double extra = with_bias ? double(bias[size_t(j)]) : 0.0;
                  const double ref = c.alpha * s + beta * double(C0[o]) + extra;
                  const double scale = c.alpha * mag + std::abs(beta * C0[o]) + std::abs(extra);
                  worst = std::max(worst, std::abs(C[o] - ref) / (scale * std::ldexp(1.0, -24)));
                }
            EXPECT_LT(worst, 4 + std::sqrt(double(K)) / 2)
                << braid::dtype_name(t) << " M=" << M << " N=" << N << " K=" << K << " batch=" << nb << " ta=" << ta
                << " tb=" << tb << " alpha=" << c.alpha << " beta=" << beta << " bias=" << with_bias;
          }
}
