// Finite-difference gradient checks for every *_forward / *_backward pair
// (the method and its error budget: kernel_checks.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "kernels/kernel_checks.h"
#include "kernels/normal_values.h"
#include "braid/kernels/cpu/adamw.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/crossentropy.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/encoder.h"
#include "braid/kernels/cpu/layernorm.h"
#include "braid/kernels/cpu/matmul.h"

namespace k = braid::kernels;

using testing_data::normal_values;

using kernel_checks::dot;
using kernel_checks::fd_check;

TEST(KernelsFD, Matmul) {
  const int64_t BT = 5, C = 7, OC = 6;
  auto inp = normal_values(size_t(BT * C), 11, 1), w = normal_values(size_t(OC * C), 11, 2),
       b = normal_values(size_t(OC), 11, 3);
  auto r = normal_values(size_t(BT * OC), 11, 4);
  std::vector<float> out(r.size());
  auto loss = [&] {
    k::matmul_forward(out.data(), inp.data(), w.data(), b.data(), BT, C, OC);
    return dot(r, out.data());
  };
  std::vector<float> dinp(inp.size(), 7.0f), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  loss();
  k::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), BT, C, OC);
  fd_check("matmul.dinp", inp, dinp, loss);  // dinp written (=): the 7s are gone
  fd_check("matmul.dweight", w, dw, loss);
  fd_check("matmul.dbias", b, db, loss);
  // Parameter grads accumulate: a second backward doubles them.
  auto dw1 = dw;
  k::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), BT, C, OC);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw[i], 2 * dw1[i]);
}

TEST(KernelsFD, LayerNorm) {
  const int64_t N = 4, C = 9;
  auto inp = normal_values(size_t(N * C), 11, 1), w = normal_values(size_t(C), 11, 2),
       b = normal_values(size_t(C), 11, 3);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] += float(i % 3);  // non-zero means
  auto r = normal_values(size_t(N * C), 11, 4);
  std::vector<float> out(r.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  auto loss = [&] {
    k::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(r, out.data());
  };
  loss();
  std::vector<float> dinp(inp.size(), 0.0f), dw(size_t(C), 0.0f), db(size_t(C), 0.0f);
  k::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(),
                        mean.data(), rstd.data(), N, C);
  fd_check("layernorm.dinp", inp, dinp, loss);
  fd_check("layernorm.dweight", w, dw, loss);
  fd_check("layernorm.dbias", b, db, loss);
}

TEST(KernelsFD, Encoder) {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tokens = {1, 3, 1, 4, 1, 0};  // repeats must accumulate
  auto wte = normal_values(size_t(V * C), 11, 1), wpe = normal_values(size_t(T * C), 11, 2);
  auto r = normal_values(size_t(B * T * C), 11, 3);
  std::vector<float> out(r.size());
  auto loss = [&] {
    k::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(r, out.data());
  };
  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  k::encoder_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  fd_check("encoder.dwte", wte, dwte, loss);
  fd_check("encoder.dwpe", wpe, dwpe, loss);
}

TEST(KernelsFD, Gelu) {
  const int64_t N = 64;
  std::vector<float> x(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) x[size_t(i)] = -4.0f + 8.0f * float(i) / float(N - 1) + 0.01f;
  auto r = normal_values(size_t(N), 11, 3);
  std::vector<float> out(static_cast<size_t>(N));
  auto loss = [&] {
    k::gelu_forward(out.data(), x.data(), N);
    return dot(r, out.data());
  };
  loss();
  // Exact values against the double formula.
  for (int64_t i = 0; i < N; ++i) {
    const double xi = x[size_t(i)];
    const double ref = 0.5 * xi * (1 + std::tanh(0.7978845608028654 * (xi + 0.044715 * xi * xi * xi)));
    EXPECT_NEAR(out[size_t(i)], ref, 2e-7 + 2e-6 * std::abs(ref)) << "x=" << xi;
  }
  std::vector<float> dx(static_cast<size_t>(N));
  k::gelu_backward(dx.data(), r.data(), x.data(), N);
  fd_check("gelu.dinp", x, dx, loss);
}

TEST(KernelsFD, Residual) {
  const int64_t N = 10;
  auto a = normal_values(size_t(N), 11, 1), b = normal_values(size_t(N), 11, 2), r = normal_values(size_t(N), 11, 3);
  std::vector<float> out(static_cast<size_t>(N));
  auto loss = [&] {
    k::residual_forward(out.data(), a.data(), b.data(), N);
    return dot(r, out.data());
  };
  std::vector<float> da(size_t(N), 0.0f), db(size_t(N), 0.0f);
  k::residual_backward(da.data(), db.data(), r.data(), N);
  fd_check("residual.dinp1", a, da, loss);
  fd_check("residual.dinp2", b, db, loss);
}

TEST(KernelsFD, SoftmaxCrossEntropyAndPadding) {
  const int64_t N = 3, V = 10, Vp = 16;
  auto logits = normal_values(size_t(N * Vp), 11, 1, 2.0f);
  std::vector<int32_t> targets = {0, 9, 4};
  std::vector<float> losses(static_cast<size_t>(N)), lse(static_cast<size_t>(N)), probs(static_cast<size_t>(N * Vp));
  const float dloss = 0.7f;
  auto loss = [&] {
    k::softmax_crossentropy_forward(losses.data(), lse.data(), nullptr, logits.data(),
                                    targets.data(), N, V, Vp);
    double s = 0;
    for (float l : losses) s += dloss * double(l);
    return s;
  };
  loss();
  // Against a double-precision softmax over [0, V) only.
  k::softmax_crossentropy_forward(losses.data(), lse.data(), probs.data(), logits.data(),
                                  targets.data(), N, V, Vp);
  for (int64_t i = 0; i < N; ++i) {
    double mx = -1e30, s = 0, psum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[size_t(i * Vp + v)]));
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(logits[size_t(i * Vp + v)]) - mx);
    const double ref = mx + std::log(s) - logits[size_t(i * Vp + targets[size_t(i)])];
    EXPECT_NEAR(losses[size_t(i)], ref, 1e-5 * std::max(1.0, ref));
    for (int64_t v = 0; v < Vp; ++v) psum += probs[size_t(i * Vp + v)];
    EXPECT_NEAR(psum, 1.0, 1e-6);
    for (int64_t v = V; v < Vp; ++v) EXPECT_EQ(probs[size_t(i * Vp + v)], 0.0f) << "padded prob";
  }
  std::vector<float> dlogits(logits.size(), 5.0f);
  k::softmax_crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss,
                                   N, V, Vp);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t v = V; v < Vp; ++v) EXPECT_EQ(dlogits[size_t(i * Vp + v)], 0.0f) << "padded grad";
  fd_check("softmax_ce.dlogits", logits, dlogits, loss);  // padded columns: numeric 0 too
  targets[1] = int32_t(V);  // a padded id is not a valid target
  EXPECT_THROW(loss(), braid::Error);
}

TEST(KernelsFD, Attention) {
  const int64_t B = 2, T = 5, C = 8, NH = 2;
  auto qkv = normal_values(size_t(B * T * 3 * C), 11, 1);
  auto r = normal_values(size_t(B * T * C), 11, 2);
  std::vector<float> out(r.size()), qkvr(static_cast<size_t>(3 * B * T * C)), att(static_cast<size_t>(B * NH * T * T));
  std::vector<float> fs(k::attention_forward_scratch_floats(B, T, C, NH));
  std::vector<float> bs(k::attention_backward_scratch_floats(B, T, C, NH));
  auto loss = [&] {
    k::attention_forward(out.data(), qkvr.data(), att.data(), fs.data(), qkv.data(), B, T, C, NH);
    return dot(r, out.data());
  };
  loss();
  // Causality: probabilities above the diagonal are exactly 0, rows sum to 1.
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      double s = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float p = att[size_t((bh * T + i) * T + j)];
        if (j > i) {
          EXPECT_EQ(p, 0.0f);
        }
        s += p;
      }
      EXPECT_NEAR(s, 1.0, 1e-6);
    }
  std::vector<float> dqkv(qkv.size(), 3.0f);
  k::attention_backward(dqkv.data(), bs.data(), r.data(), qkvr.data(), att.data(), B, T, C, NH);
  fd_check("attention.dqkv", qkv, dqkv, loss);
}

// The fused kernel's gradients against finite differences: T = 5 in one tile,
// and T = 300, which crosses query tiles (64) and a key tile (256).
TEST(KernelsFD, FlashAttention) {
  for (const int64_t T : {int64_t(5), int64_t(300)}) {
    const int64_t B = T > 64 ? 1 : 2, C = 8, NH = 2;
    auto qkv = normal_values(size_t(B * T * 3 * C), 11, 1);
    auto r = normal_values(size_t(B * T * C), 11, 2);
    std::vector<float> out(r.size()), qkvr(size_t(3 * B * T * C)), lse(k::flash_attention_lse_floats(B, T, NH));
    std::vector<float> bs(k::flash_attention_backward_scratch_floats(B, T, C, NH));
    auto loss = [&] {
      k::flash_attention_forward(out.data(), qkvr.data(), lse.data(), qkv.data(), braid::DType::f32, B, T, C, NH);
      return dot(r, out.data());
    };
    loss();
    std::vector<float> dqkv(qkv.size(), 3.0f);
    k::flash_attention_backward(dqkv.data(), bs.data(), r.data(), out.data(), qkvr.data(), lse.data(), braid::DType::f32,
                                B, T, C, NH);
    fd_check("flash_attention.dqkv T=" + std::to_string(T), qkv, dqkv, loss);
  }
}

TEST(Kernels, AdamWMatchesClosedForm) {
  const size_t n = 37;
  auto p = normal_values(n, 11, 1), g0 = normal_values(n, 11, 2);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = g0[i] * float(t);  // vary over steps
    k::adamw_update(p.data(), g.data(), m.data(), v.data(), n, float(lr), float(b1), float(b2),
                    float(eps), float(wd), t);
    for (size_t i = 0; i < n; ++i) {
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * double(g[i]) * g[i];
      const double mh = md[i] / (1 - std::pow(b1, double(t)));
      const double vh = vd[i] / (1 - std::pow(b2, double(t)));
      pd[i] = pd[i] - lr * wd * pd[i] - lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pd[i], 2e-6) << i;
  EXPECT_THROW(k::adamw_update(p.data(), g0.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f,
                               1e-8f, 0.0f, 0),
               braid::Error);
}

// The scaled update (clipping / loss-scale factor folded in) equals the plain
// update on gradients scaled beforehand, bit for bit, for f32 gradients; half
// gradients are widened exactly first.
TEST(Kernels, AdamWScaledEqualsPrescaledGradients) {
  const size_t n = 203;
  const auto p0 = normal_values(n, 11, 3), g = normal_values(n, 11, 4);
  for (const braid::DType t : {braid::DType::f32, braid::DType::bf16, braid::DType::f16}) {
    std::vector<uint16_t> half(n);
    std::vector<float> widened(g);
    if (t != braid::DType::f32) {
      for (size_t i = 0; i < n; ++i) braid::store_from_f32(half.data(), i, t, g[i]);
      for (size_t i = 0; i < n; ++i) widened[i] = braid::load_as_f32(half.data(), i, t);
    }
    const void* src = t == braid::DType::f32 ? static_cast<const void*>(g.data()) : half.data();
    for (const float mult : {1.0f, 0.37f, 1.0f / 1024}) {
      std::vector<float> pa(p0), pb(p0), ma(n, 0.f), va(n, 0.f), mb(n, 0.f), vb(n, 0.f), scaled(n);
      for (size_t i = 0; i < n; ++i) scaled[i] = widened[i] * mult;
      for (int64_t step = 1; step <= 2; ++step) {
        k::adamw_update_mixed(pa.data(), src, t, mult, ma.data(), va.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
        k::adamw_update(pb.data(), scaled.data(), mb.data(), vb.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      }
      EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), n * sizeof(float))) << braid::dtype_name(t) << " x" << mult;
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), n * sizeof(float))) << braid::dtype_name(t) << " x" << mult;
    }
  }
}

// With a bf16 output the update also writes the parameters rounded to bf16:
// bitwise the cast of the f32 result (a bf16 run's compute copy), the f32
// state unchanged.
TEST(Kernels, AdamWWritesTheBf16CopyOfItsResult) {
  const size_t n = 4099;  // more than a thread's share, odd
  const auto p0 = normal_values(n, 11, 5), g = normal_values(n, 11, 6);
  std::vector<float> pa(p0), pb(p0), ma(n, 0.f), va(n, 0.f), mb(n, 0.f), vb(n, 0.f);
  std::vector<uint16_t> out(n, 0xffff), cast(n);
  for (int64_t step = 1; step <= 2; ++step) {
    k::adamw_update_mixed(pa.data(), g.data(), braid::DType::f32, 0.5f, ma.data(), va.data(), n, 1e-2f, 0.9f, 0.95f,
                          1e-8f, 0.1f, step, out.data());
    k::adamw_update_mixed(pb.data(), g.data(), braid::DType::f32, 0.5f, mb.data(), vb.data(), n, 1e-2f, 0.9f, 0.95f,
                          1e-8f, 0.1f, step);
  }
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(ma.data(), mb.data(), n * sizeof(float)));
  k::cast_from_f32(cast.data(), braid::DType::bf16, pb.data(), n);
  EXPECT_EQ(out, cast);
}
