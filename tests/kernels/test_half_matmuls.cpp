// GPT with half-precision matmul operands (bf16 / fp16 activations, output
// gradients and the storage's compute copy of the weights, multiplied by
// oneDNN, or widened exactly to f32 where it has no matmul for the dtype)
// against the same model multiplying the same rounded values in f32: the
// products are exact in both, so only the order of the f32 sums differs.
#include <gtest/gtest.h>

#include "kernels/kernel_checks.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "braid/core/rng.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/crossentropy.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/model/gpt.h"
#include "braid/model/param_layout.h"
#include "braid/parallel/data_parallel/half_storage.h"
#include "kernels/tiny_config.h"

using braid::DType;
using braid::model::GPT;
using braid::model::GPTConfig;
using braid::model::Recompute;

using kernel_checks::rel_l2;

namespace {

std::vector<int32_t> tokens(size_t n, uint64_t seed) {
  braid::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(100));
  return t;
}

struct Pass {
  float loss;
  std::vector<float> grads, logits;
};

// One forward and backward from zeroed gradients; split: backward as the
// zero-bubble B then W passes.
Pass run_pass(GPT& m, braid::parallel::HalfPrecisionStorage& hs, const std::vector<int32_t>& tok,
              const std::vector<int32_t>& tgt, int64_t B, int64_t T, bool split = false) {
  hs.zero_grads();
  Pass p;
  p.loss = m.forward(tok.data(), tgt.data(), B, T);
  p.logits.resize(size_t(B * T * m.config().padded_vocab_size));
  m.logits_to_f32(p.logits.data(), 0, B * T);
  if (split) {
    m.backward_input(1.0f);
    m.backward_weight();
  } else {
    m.backward(1.0f);
  }
  const float* g = static_cast<const float*>(hs.grads());
  p.grads.assign(g, g + hs.num_params());
  return p;
}

// GPT's initialisation with every parameter moved by N(0, 0.05^2): biases and
// LayerNorm offsets away from zero and scores away from uniform attention, so a
// dropped bias or a wrong score scale shows in the checks below.
void init_perturbed(GPT& m) {
  m.init_weights(3);
  float* p = m.params();
  for (size_t i = 0; i < m.num_params(); ++i) p[i] += 0.05f * braid::rand_normal(17, 0, i);
}

// Every matmul multiplies the same t values (natively, or widened to f32
// where oneDNN has no t matmul), so each product is exact and only the
// order of the f32 sums differs: a relative ~1e-7 of sum |a b| (test
// Gemm.HalfOperandsAllLayoutsWithinF32SummationError). Every activation is
// then rounded to t, and one whose two sums straddle a rounding boundary
// rounds to the neighbouring value on one path: it moves by one ulp, up to
// 2u relative (u, the unit roundoff: 2^-8 in bf16, 2^-11 in fp16), and the
// layers after it carry that on, each rounding to t again. Flips are rare
// (the sums differ by ~1e-7, the boundaries lie an ulp apart), so a tensor's
// rel_l2 stays well below 2u; fewer flip in bf16 than in fp16, whose ulp is 8x
// finer. The loss averages the logits' differences over tokens and vocabulary.
// Bounds: logits 2u, gradients u in bf16 and 2u in fp16, loss u/16. Measured
// with the other order (oneDNN's AMX kernels, or either path made to sum K in
// two halves), as multiples of u: logits 0.17 / 0.66 (bf16 / fp16),
// gradients 0.21 / 0.77, loss 0.0007 / 0.011; where both paths block K alike
// (oneDNN's avx512_core_bf16 and f32 kernels) the logits are equal. A wrong
// operand errs 50u and more; a dropped bias 57u, a wrong score scale 23u, and
// gradients truncated to bf16 instead of rounded 1.6u in bf16 (caught by u),
// 24u in fp16 (init_perturbed gives the biases and scores something to show).
void expect_same_rounded_model(const Pass& a, const Pass& e, DType t, const char* what) {
  const double u = t == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  EXPECT_NEAR(a.loss, e.loss, u / 16 * e.loss) << what;
  EXPECT_LT(rel_l2(a.logits, e.logits), 2 * u) << what;
  EXPECT_LT(rel_l2(a.grads, e.grads), (t == DType::bf16 ? 1 : 2) * u) << what;
}

}  // namespace

namespace {

// A GPT with operands stored in `t` against the same model on t-rounded
// values in f32 (the checks below).
void check_half_operands(DType t) {
  const char* name = braid::dtype_name(t);
  const GPTConfig cfg = testing_data::small_vocab_tiny();
  const int64_t B = 2, T = 16;
  GPT init(cfg, B, T);
  init_perturbed(init);
  const size_t n = init.num_params();
  // One storage per precision: a model of half operands leaves its matmul weights stale in the f32 copy.
  braid::parallel::HalfPrecisionStorage hs(braid::model::unit_bounds(cfg), t, DType::f32, n, nullptr),
      hs32(braid::model::unit_bounds(cfg), t, DType::f32, n, nullptr);
  braid::kernels::cast_from_f32(hs.compute(), t, init.params(), n);
  braid::kernels::cast_from_f32(hs32.compute(), t, init.params(), n);
  const braid::model::Precision half{t, t}, rounded{t, DType::f32};
  GPT native(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::none, half);
  GPT emulated(cfg, B, T, nullptr, &hs32, {}, 0.0f, {}, Recompute::none, rounded);
  GPT selective(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::selective, half);
  GPT full(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::full, half);
  ASSERT_TRUE(native.half_matmuls());
  ASSERT_FALSE(emulated.half_matmuls());
  // Half-precision operands need the storage's compute copy and the operands' dtype to be the compute dtype.
  EXPECT_THROW(GPT(cfg, B, T, nullptr, nullptr, {}, 0.0f, {}, Recompute::none, half), braid::ConfigError);
  EXPECT_THROW(GPT(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::none, {t == DType::f16 ? DType::bf16 : DType::f16, t}),
               braid::ConfigError);
  // Everything but the statistics takes half the floats, the residual stream included.
  const auto p32 = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, rounded);
  const auto p16 = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, half);
  const size_t BT = size_t(B * T), C = size_t(cfg.n_embd);
  // ln1, ln2, attproj, fcproj, res2, res3 (BT x C each); atty (BT x C); fch, fch_gelu (BT x 4C each); qkv,
  // qkvr (BT x 3C each); the attention probabilities (B x NH x T x T: T = 16
  // runs the kernel that saves them).
  EXPECT_EQ(p32.layer_act_floats - p16.layer_act_floats,
            (6 * BT * C + BT * C + 8 * BT * C + 6 * BT * C) / 2 + size_t(B * cfg.n_head * T * T) / 2);
  const auto tok = tokens(size_t(B * T), 1), tgt = tokens(size_t(B * T), 2);
  const Pass a = run_pass(native, hs, tok, tgt, B, T), e = run_pass(emulated, hs32, tok, tgt, B, T);
  // The residual stream is rounded to t on both paths: the stage output
  // (the last block's res3, f32) holds t's values.
  for (const GPT* m : {&native, &emulated}) {
    std::vector<float> out(m->stage_output(), m->stage_output() + BT * C), back(out.size());
    std::vector<uint16_t> h(out.size());
    braid::kernels::cast_from_f32(h.data(), t, out.data(), out.size());
    braid::kernels::cast_to_f32(back.data(), h.data(), t, out.size());
    EXPECT_EQ(out, back) << name << (m == &native ? " native" : " emulated");
  }
  expect_same_rounded_model(a, e, t, name);
  // Recomputation and the split backward rebuild and stash the same half
  // operands: bitwise the same gradients.
  const Pass s = run_pass(selective, hs, tok, tgt, B, T);
  EXPECT_EQ(s.loss, a.loss);
  EXPECT_EQ(s.grads, a.grads) << name << " selective recomputation";
  const Pass f = run_pass(full, hs, tok, tgt, B, T);
  EXPECT_EQ(f.loss, a.loss);
  EXPECT_EQ(f.grads, a.grads) << name << " full recomputation (the block inputs widened from t)";
  const Pass z = run_pass(native, hs, tok, tgt, B, T, true);
  EXPECT_EQ(z.grads, a.grads) << name << " backward_input + backward_weight";
}

}  // namespace

TEST(HalfMatmuls, Bf16OperandsMatchTheSameRoundedValuesInF32) { check_half_operands(DType::bf16); }

// fp16 operands and activations are stored in fp16 on every CPU; without an
// fp16 matmul in oneDNN they are widened exactly and multiplied in f32.
TEST(HalfMatmuls, Fp16OperandsMatchTheSameRoundedValuesInF32) { check_half_operands(DType::f16); }

TEST(HalfMatmuls, Fp32ResidualKeepsTheResidualStreamInF32) {
  const GPTConfig cfg = testing_data::small_vocab_tiny();
  const int64_t B = 2, T = 16;
  GPT init(cfg, B, T);
  init_perturbed(init);
  const size_t n = init.num_params();
  braid::parallel::HalfPrecisionStorage hs(braid::model::unit_bounds(cfg), DType::bf16, DType::f32, n, nullptr),
      hs32(braid::model::unit_bounds(cfg), DType::bf16, DType::f32, n, nullptr);
  braid::kernels::cast_from_f32(hs.compute(), DType::bf16, init.params(), n);
  braid::kernels::cast_from_f32(hs32.compute(), DType::bf16, init.params(), n);
  braid::model::Precision bf16{DType::bf16, DType::bf16}, rounded{DType::bf16, DType::f32};
  bf16.fp32_residual = rounded.fp32_residual = true;
  // res2 and res3 keep 4 bytes an element: 2 x BT x C floats more per block than the default.
  braid::model::Precision dflt{DType::bf16, DType::bf16};
  const auto pk = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, bf16);
  const auto pd = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, dflt);
  const size_t BT = size_t(B * T), C = size_t(cfg.n_embd);
  EXPECT_EQ(pk.layer_act_floats - pd.layer_act_floats, BT * C);
  GPT native(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::none, bf16);
  GPT emulated(cfg, B, T, nullptr, &hs32, {}, 0.0f, {}, Recompute::none, rounded);
  GPT full(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::full, bf16);
  const auto tok = tokens(BT, 1), tgt = tokens(BT, 2);
  const Pass a = run_pass(native, hs, tok, tgt, B, T), e = run_pass(emulated, hs32, tok, tgt, B, T);
  // The stage output is an f32 sum of bf16 branch outputs: most values are not bf16's.
  size_t not_bf16 = 0;
  for (const GPT* m : {&native, &emulated}) {
    for (size_t i = 0; i < BT * C; ++i) {
      const float v = m->stage_output()[i];
      uint16_t h;
      float back;
      braid::kernels::cast_from_f32(&h, DType::bf16, &v, 1);
      braid::kernels::cast_to_f32(&back, &h, DType::bf16, 1);
      not_bf16 += back != v;
    }
  }
  EXPECT_GT(not_bf16, BT * C);
  // Both paths multiply the same bf16 operands.
  expect_same_rounded_model(a, e, DType::bf16, "fp32 residual");
  const Pass f = run_pass(full, hs, tok, tgt, B, T);
  EXPECT_EQ(f.grads, a.grads) << "full recomputation";
}

namespace {

std::vector<float> normal(size_t n, uint64_t seed, float sd = 1.0f) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = sd * braid::rand_normal(seed, 0, i);
  return x;
}

// x rounded to bf16: its storage, and the same values in f32.
struct Rounded {
  std::vector<uint16_t> h;
  std::vector<float> f;
  explicit Rounded(const std::vector<float>& x) : h(x.size()), f(x.size()) {
    braid::kernels::cast_from_f32(h.data(), DType::bf16, x.data(), x.size());
    braid::kernels::cast_to_f32(f.data(), h.data(), DType::bf16, x.size());
  }
};

std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  braid::kernels::cast_to_f32(f.data(), h.data(), DType::bf16, h.size());
  return f;
}

}  // namespace

// The kernels that read activations stored in bf16 widen them exactly and
// compute in f32: the elementwise ones give bitwise what the f32 kernels give
// on the same rounded values; the loss's row sums may be vectorised in
// another order (f32 roundoff, a few ulp).
TEST(HalfActivations, ElementwiseAndLossOnBf16StorageMatchF32OnTheRoundedValues) {
  namespace k = braid::kernels;
  const int64_t N = 1000, rows = 6, V = 90, Vp = 96;
  const Rounded x(normal(size_t(N), 1, 2.0f)), z(normal(size_t(rows * Vp), 2, 3.0f));
  const std::vector<float> g = normal(size_t(N), 3), r = normal(size_t(N), 4);
  std::vector<float> a(static_cast<size_t>(N)), b(static_cast<size_t>(N));
  k::gelu_forward(a.data(), x.h.data(), DType::bf16, N);
  k::gelu_forward(b.data(), x.f.data(), N);
  EXPECT_EQ(a, b) << "gelu_forward";
  k::gelu_backward(a.data(), g.data(), x.h.data(), DType::bf16, N);
  k::gelu_backward(b.data(), g.data(), x.f.data(), N);
  EXPECT_EQ(a, b) << "gelu_backward";
  k::residual_forward(a.data(), r.data(), x.h.data(), DType::bf16, N);
  k::residual_forward(b.data(), r.data(), x.f.data(), N);
  EXPECT_EQ(a, b) << "residual_forward";
  std::vector<int32_t> tgt(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) tgt[size_t(i)] = int32_t((i * 37) % V);
  const size_t R = static_cast<size_t>(rows);
  std::vector<float> l1(R), l2(R), s1(R), s2(R);
  k::softmax_crossentropy_forward(l1.data(), s1.data(), nullptr, z.h.data(), DType::bf16, tgt.data(), rows, V, Vp);
  k::softmax_crossentropy_forward(l2.data(), s2.data(), nullptr, z.f.data(), tgt.data(), rows, V, Vp);
  EXPECT_LT(rel_l2(l1, l2), 1e-6);
  EXPECT_LT(rel_l2(s1, s2), 1e-6);
  std::vector<float> d1(static_cast<size_t>(rows * Vp)), d2(static_cast<size_t>(rows * Vp));
  k::softmax_crossentropy_backward(d1.data(), z.h.data(), DType::bf16, s1.data(), tgt.data(), 0.5f, rows, V, Vp);
  k::softmax_crossentropy_backward(d2.data(), z.f.data(), s2.data(), tgt.data(), 0.5f, rows, V, Vp);
  EXPECT_LT(rel_l2(d1, d2), 1e-6);
  // The vocabulary-parallel pieces, on a slice of 40 columns starting at 30.
  std::vector<float> m1(R), m2(R), t1(R), t2(R);
  k::vocab_parallel_max(m1.data(), z.h.data(), DType::bf16, rows, 40, Vp);
  k::vocab_parallel_max(m2.data(), z.f.data(), rows, 40, Vp);
  EXPECT_EQ(m1, m2);  // a max has no order
  k::vocab_parallel_sumexp(s1.data(), t1.data(), z.h.data(), DType::bf16, m1.data(), tgt.data(), 30, rows, 40, Vp);
  k::vocab_parallel_sumexp(s2.data(), t2.data(), z.f.data(), m2.data(), tgt.data(), 30, rows, 40, Vp);
  EXPECT_LT(rel_l2(s1, s2), 1e-6);
  EXPECT_EQ(t1, t2);
}

// Attention on bf16 storage (oneDNN's bf16 products) against f32 storage of the
// same rounded values (round = bf16: f32 products): the same products, so only
// the f32 sums' order differs, and a probability or gradient near a bf16
// rounding boundary may round to its neighbour (2^-8 relative, a few
// elements). A wrong dtype, layout or rounding step moves everything by O(1)
// or by the bf16 rounding itself (~2^-9 relative everywhere).
TEST(HalfActivations, AttentionOnBf16StorageMatchesF32OnTheRoundedValues) {
  namespace k = braid::kernels;
  const int64_t B = 2, T = 24, C = 32, NH = 4, BT = B * T;
  const size_t natt = size_t(B * NH * T * T);
  const Rounded qkv(normal(static_cast<size_t>(BT * 3 * C), 5));
  const std::vector<float> dout = normal(static_cast<size_t>(BT * C), 6);
  const size_t n_qkv = static_cast<size_t>(BT * 3 * C), n_out = static_cast<size_t>(BT * C);
  std::vector<uint16_t> qkvr_h(n_qkv), att_h(natt);
  std::vector<float> qkvr_f(n_qkv), att_f(natt), out_h(n_out), out_f(n_out);
  std::vector<float> fs(k::attention_forward_scratch_floats(B, T, C, NH, DType::bf16));
  std::vector<float> bs(k::attention_backward_scratch_floats(B, T, C, NH, DType::bf16));
  k::attention_forward(out_h.data(), qkvr_h.data(), att_h.data(), fs.data(), qkv.h.data(), DType::bf16, B, T, C, NH,
                       DType::bf16);
  k::attention_forward(out_f.data(), qkvr_f.data(), att_f.data(), fs.data(), qkv.f.data(), DType::f32, B, T, C, NH,
                       DType::bf16);
  EXPECT_EQ(widen(qkvr_h), qkvr_f) << "the head-major copy is exact";
  // The stored probabilities are bf16 values in both.
  std::vector<float> att_r = att_f;
  k::round_to_dtype(att_r.data(), DType::bf16, natt);
  EXPECT_EQ(att_r, att_f);
  // Measured: att equal, out 5e-9, dqkv 2e-8; the bf16 rounding itself is 1.5e-3.
  EXPECT_LT(rel_l2(widen(att_h), att_f), 1e-4);
  EXPECT_LT(rel_l2(out_h, out_f), 1e-5);
  // Against the f32 kernel without rounding: the bf16 rounding shows.
  std::vector<float> out32(n_out), qkvr32(n_qkv), att32(natt);
  k::attention_forward(out32.data(), qkvr32.data(), att32.data(), fs.data(), qkv.f.data(), B, T, C, NH);
  EXPECT_GT(rel_l2(att_f, att32), 3e-4);
  EXPECT_LT(rel_l2(out32, out_f), 1e-2);
  std::vector<float> dh(n_qkv), df(n_qkv);
  k::attention_backward(dh.data(), bs.data(), dout.data(), qkvr_h.data(), att_h.data(), DType::bf16, B, T, C, NH,
                        DType::bf16);
  k::attention_backward(df.data(), bs.data(), dout.data(), qkvr_f.data(), att_f.data(), DType::f32, B, T, C, NH,
                        DType::bf16);
  EXPECT_LT(rel_l2(dh, df), 1e-5);
  EXPECT_THROW(k::attention_forward(out_h.data(), qkvr_h.data(), att_h.data(), fs.data(), qkv.h.data(), DType::bf16,
                                    B, T, C, NH, DType::f16),
               braid::Error);
}
