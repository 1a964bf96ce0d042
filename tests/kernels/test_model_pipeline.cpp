// Model-level pipeline pieces without communication: ranks holding several
// model chunks (interleaved schedules) and the zero-bubble split of backward
// into B (input gradients) and W (weight gradients), each checked bitwise
// against one whole model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/model/gpt.h"

using braid::model::GPT;
using braid::model::GPTConfig;
using braid::model::PipelineChunk;
using braid::model::PipelineStage;

namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t V, uint64_t seed) {
  braid::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(uint64_t(V)));
  return t;
}

GPTConfig four_layers() {
  GPTConfig c = GPTConfig::preset("tiny");
  c.name = "tiny-4l";
  c.n_layer = 4;
  c.vocab_size = 100;
  c.padded_vocab_size = 128;
  return c;
}

// Copies every parameter of `part` from `whole` by name.
void copy_params(const GPT& whole, GPT& part) {
  for (const auto& p : part.param_table())
    std::memcpy(part.params() + p.offset, whole.params() + whole.param(p.name).offset, p.numel * sizeof(float));
}

}  // namespace

TEST(GPTPipeline, BackwardSplitIntoInputAndWeightIsBitwiseBackward) {
  // B of two micro-batches before either W (the zero-bubble order), with
  // dropout: the gradients equal forward/backward micro-batch by micro-batch.
  const GPTConfig cfg = four_layers();
  const int64_t B = 2, T = 8, m = 3;
  GPT ref(cfg, B, T, nullptr, nullptr, {}, 0.1f);
  PipelineStage st;
  st.slots = m;
  GPT zb(cfg, B, T, nullptr, nullptr, {}, 0.1f, st);
  ref.init_weights(5);
  zb.init_weights(5);
  ref.zero_grad();
  zb.zero_grad();
  std::vector<std::vector<int32_t>> tok, tgt;
  for (int j = 0; j < m; ++j) {
    tok.push_back(random_tokens(size_t(B * T), cfg.vocab_size, 10 + j));
    tgt.push_back(random_tokens(size_t(B * T), cfg.vocab_size, 20 + j));
  }
  for (int j = 0; j < m; ++j) {
    ref.set_dropout_key(1, 1, j * B * T);
    ref.forward(tok[size_t(j)].data(), tgt[size_t(j)].data(), B, T);
    ref.backward(1.0f / m);
  }
  for (int j = 0; j < m; ++j) {
    zb.set_slot(j);
    zb.set_dropout_key(1, 1, j * B * T);
    zb.forward(tok[size_t(j)].data(), tgt[size_t(j)].data(), B, T);
  }
  for (int j = 0; j < m; ++j) {
    zb.set_slot(j);
    zb.set_dropout_key(1, 1, j * B * T);
    zb.backward_input(1.0f / m);
    if (j >= 1) zb.set_slot(j - 1), zb.backward_weight();
  }
  zb.set_slot(m - 1);
  zb.backward_weight();
  EXPECT_THROW(zb.backward_weight(), braid::Error) << "W twice";
  for (size_t i = 0; i < ref.num_params(); ++i) ASSERT_EQ(ref.grads()[i], zb.grads()[i]) << i;
}

TEST(GPTPipeline, ChunksOnTwoRanksEqualTheWholeModel) {
  // 4 layers as 4 virtual stages of 1 layer on 2 "ranks": rank 0 holds layers
  // 0 and 2, rank 1 layers 1 and 3 (Megatron's interleaved placement). The
  // activations and gradients are handed over by hand.
  const GPTConfig cfg = four_layers();
  const int64_t B = 2, T = 8, m = 2;
  GPT whole(cfg, B, T);
  whole.init_weights(7);
  whole.zero_grad();
  PipelineStage s0, s1;
  s0.chunks = {PipelineChunk{0, 1, m}, PipelineChunk{2, 3, m}};
  s1.chunks = {PipelineChunk{1, 2, m}, PipelineChunk{3, 4, m}};
  GPT r0(cfg, B, T, nullptr, nullptr, {}, 0.0f, s0), r1(cfg, B, T, nullptr, nullptr, {}, 0.0f, s1);
  EXPECT_TRUE(r0.is_first_stage());
  EXPECT_FALSE(r0.is_last_stage());
  EXPECT_TRUE(r1.is_last_stage());
  EXPECT_TRUE(r0.chunk_has_embed(0) && !r0.chunk_has_embed(1) && r1.chunk_has_head(1) && !r1.chunk_has_head(0));
  // r0 holds wte/wpe and blocks 0, 2; r1 holds blocks 1, 3, ln_f and the tied copy of wte.
  EXPECT_NO_THROW(r0.param("h.2.mlp.c_fc.weight"));
  EXPECT_THROW(r0.param("h.1.mlp.c_fc.weight"), braid::Error);
  EXPECT_NO_THROW(r1.param("wte.weight"));
  copy_params(whole, r0);
  copy_params(whole, r1);
  r0.zero_grad();
  r1.zero_grad();
  const size_t n = size_t(B * T * cfg.n_embd) * sizeof(float);
  std::vector<GPT*> rank_of = {&r0, &r1, &r0, &r1};  // virtual stage q on rank q % 2, chunk q / 2
  std::vector<float> ref_loss, loss;
  for (int j = 0; j < m; ++j) {
    const auto tok = random_tokens(size_t(B * T), cfg.vocab_size, 30 + j);
    const auto tgt = random_tokens(size_t(B * T), cfg.vocab_size, 40 + j);
    ref_loss.push_back(whole.forward(tok.data(), tgt.data(), B, T));
    whole.backward(0.5f);
    for (int q = 0; q < 4; ++q) {
      GPT& g = *rank_of[size_t(q)];
      g.set_slot(j, q / 2);
      if (q > 0) {
        GPT& prev = *rank_of[size_t(q - 1)];
        prev.set_slot(j, (q - 1) / 2);
        std::memcpy(g.stage_input(), prev.stage_output(), n);
      }
      const float l = g.forward(q == 0 ? tok.data() : nullptr, q == 3 ? tgt.data() : nullptr, B, T);
      if (q == 3) loss.push_back(l);
    }
  }
  for (int j = 0; j < m; ++j) {
    for (int q = 3; q >= 0; --q) {
      GPT& g = *rank_of[size_t(q)];
      g.set_slot(j, q / 2);
      if (q < 3) std::memcpy(g.boundary_grad(), rank_of[size_t(q + 1)]->boundary_grad(), n);
      g.backward(0.5f);
    }
  }
  EXPECT_EQ(ref_loss, loss);
  // The tied embedding: the whole model's wte gradient is the sum of both
  // copies' (to rounding: the whole model adds head and encoder per micro-batch).
  const size_t o = whole.param("wte.weight").offset, o0 = r0.param("wte.weight").offset,
               o1 = r1.param("wte.weight").offset;
  for (size_t i = 0; i < r0.param("wte.weight").numel; ++i) {
    const float sum = r0.grads()[o0 + i] + r1.grads()[o1 + i];
    ASSERT_NEAR(whole.grads()[o + i], sum, 1e-6f + 1e-5f * std::abs(sum)) << "wte[" << i << "]";
  }
  for (GPT* r : {&r0, &r1}) {
    for (const auto& p : r->param_table()) {
      // wte: checked above; the head's copy of wpe gets no gradient (its sum with
      // the first stage's is the first stage's).
      if (p.name == "wte.weight" || (r == &r1 && p.name == "wpe.weight")) continue;
      const float* a = whole.grads() + whole.param(p.name).offset;
      for (size_t i = 0; i < p.numel; ++i) ASSERT_EQ(a[i], r->grads()[p.offset + i]) << p.name << "[" << i << "]";
    }
  }
  // Plan = allocation for chunked stages.
  const auto plan = GPT::memory_plan(cfg, B, T, true, 1, false, 0.0f, s1);
  EXPECT_EQ(plan.num_params, r1.num_params());
  EXPECT_THROW(r0.set_slot(0, 2), braid::Error);
  EXPECT_THROW(r0.set_slot(m, 1), braid::Error);
  PipelineStage bad;
  bad.chunks = {PipelineChunk{2, 3, 1}, PipelineChunk{0, 1, 1}};
  EXPECT_THROW(GPT(cfg, B, T, nullptr, nullptr, {}, 0.0f, bad), braid::ConfigError);
}
