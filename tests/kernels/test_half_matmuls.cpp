// GPT with half-precision matmul operands (bf16 activations, output gradients
// and the storage's compute copy of the weights, multiplied by oneDNN) against
// the same model multiplying the same rounded values in f32: the products are
// exact in both, so only the order of the f32 sums differs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "braid/core/rng.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/model/gpt.h"
#include "braid/model/param_layout.h"
#include "braid/parallel/data_parallel/half_storage.h"
#include "kernels/tiny_config.h"

using braid::DType;
using braid::model::GPT;
using braid::model::GPTConfig;
using braid::model::Recompute;

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
  p.logits.assign(m.logits(), m.logits() + B * T * m.config().padded_vocab_size);
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

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * double(a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

}  // namespace

TEST(HalfMatmuls, Bf16OperandsMatchTheSameRoundedValuesInF32) {
  if (!braid::kernels::half_matmul_supported(DType::bf16)) GTEST_SKIP() << "oneDNN has no bf16 matmul here";
  const GPTConfig cfg = testing_data::small_vocab_tiny();
  const int64_t B = 2, T = 16;
  GPT init(cfg, B, T);
  init.init_weights(3);
  const size_t n = init.num_params();
  // One storage per precision: a model of bf16 operands leaves its matmul weights stale in the f32 copy.
  braid::parallel::HalfPrecisionStorage hs(braid::model::unit_bounds(cfg), DType::bf16, DType::f32, n, nullptr),
      hs32(braid::model::unit_bounds(cfg), DType::bf16, DType::f32, n, nullptr);
  braid::kernels::cast_from_f32(hs.compute(), DType::bf16, init.params(), n);
  braid::kernels::cast_from_f32(hs32.compute(), DType::bf16, init.params(), n);
  const braid::model::Precision bf16{DType::bf16, DType::bf16}, rounded{DType::bf16, DType::f32};
  GPT native(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::none, bf16);
  GPT emulated(cfg, B, T, nullptr, &hs32, {}, 0.0f, {}, Recompute::none, rounded);
  GPT selective(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::selective, bf16);
  ASSERT_TRUE(native.half_matmuls());
  ASSERT_FALSE(emulated.half_matmuls());
  // Half-precision operands need the storage's compute copy and the operands' dtype to be the compute dtype.
  EXPECT_THROW(GPT(cfg, B, T, nullptr, nullptr, {}, 0.0f, {}, Recompute::none, bf16), braid::ConfigError);
  EXPECT_THROW(GPT(cfg, B, T, nullptr, &hs, {}, 0.0f, {}, Recompute::none, {DType::f16, DType::bf16}),
               braid::ConfigError);
  // The kept matmul inputs take half the floats.
  const auto p32 = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, rounded);
  const auto p16 = braid::model::memory_plan(cfg, B, T, false, 1, false, 0.0f, {}, Recompute::none, bf16);
  const size_t BT = size_t(B * T), C = size_t(cfg.n_embd);
  EXPECT_EQ(p32.layer_act_floats - p16.layer_act_floats, (2 * BT * C + BT * C + 4 * BT * C) / 2);
  const auto tok = tokens(size_t(B * T), 1), tgt = tokens(size_t(B * T), 2);
  const Pass a = run_pass(native, hs, tok, tgt, B, T), e = run_pass(emulated, hs32, tok, tgt, B, T);
  // Every matmul multiplies the same bf16 values; its f32 sums may round
  // differently (relative ~1e-7), and an activation near a bf16 rounding
  // boundary may then round to the neighbouring value (2^-8 relative): a few
  // elements move by up to a bf16 ulp, the rest by f32 roundoff. A wrong
  // operand (another tensor, a stale copy, the wrong dtype) moves everything by
  // O(1). Measured: 3e-8 for logits and gradients, loss equal.
  EXPECT_NEAR(a.loss, e.loss, 1e-5 * e.loss);
  EXPECT_LT(rel_l2(a.logits, e.logits), 1e-4);
  EXPECT_LT(rel_l2(a.grads, e.grads), 1e-3);
  // Recomputation and the split backward rebuild and stash the same bf16
  // operands: bitwise the same gradients.
  const Pass s = run_pass(selective, hs, tok, tgt, B, T);
  EXPECT_EQ(s.loss, a.loss);
  EXPECT_EQ(s.grads, a.grads) << "selective recomputation";
  const Pass z = run_pass(native, hs, tok, tgt, B, T, true);
  EXPECT_EQ(z.grads, a.grads) << "backward_input + backward_weight";
}
