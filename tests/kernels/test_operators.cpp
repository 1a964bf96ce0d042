// The model's operator interface (model/operators.h): the blocks call each
// operator once per layer through it, a strand's own operators slot in
// without changing the results, and the plain forms check what they are given.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/model/gpt.h"
#include "braid/model/operators.h"
#include "braid/parallel/tensor/operators.h"
#include "kernels/tiny_config.h"

using braid::model::AttentionGrads;
using braid::model::AttentionInputs;
using braid::model::AttentionSaved;
using braid::model::AttentionShape;
using braid::model::GPT;
using braid::model::GPTConfig;
using braid::model::Operators;

namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t V, uint64_t seed) {
  braid::Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(uint64_t(V)));
  return t;
}

/// The plain operators, counting the calls a context-parallel strand would
/// replace and recording the attention views the model passes.
class CountingOperators : public Operators {
 public:
  struct Counts {
    int attention_forward = 0, attention_backward = 0, dropout = 0, norm_forward = 0, embedding_forward = 0;
    int64_t ld = 0, heads = 0, head_dim = 0;
  };
  explicit CountingOperators(Counts* c) : c_(c) {}
  void attention_forward(float* out, const AttentionSaved& saved, const AttentionInputs& qkv,
                         const AttentionShape& s) override {
    ++c_->attention_forward;
    c_->ld = qkv.ld, c_->heads = s.heads, c_->head_dim = s.head_dim;
    Operators::attention_forward(out, saved, qkv, s);
  }
  void attention_backward(const AttentionGrads& d, const float* dout, const AttentionSaved& saved,
                          const AttentionShape& s) override {
    ++c_->attention_backward;
    Operators::attention_backward(d, dout, saved, s);
  }
  void dropout(float* out, const float* in, int64_t C, const braid::model::DropoutKey& key) override {
    ++c_->dropout;
    Operators::dropout(out, in, C, key);
  }
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                    int64_t C) override {
    ++c_->norm_forward;
    Operators::norm_forward(out, mean, rstd, x, w, b, C);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t Vp) override {
    ++c_->embedding_forward;
    Operators::embedding_forward(out, tokens, wte, wpe, Vp);
  }

 private:
  Counts* c_;
};

/// Loss and gradients of one training micro-batch with dropout.
std::vector<float> step(GPT& m, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt, int64_t B,
                        int64_t T, float* loss) {
  m.init_weights(3);
  m.zero_grad();
  m.set_dropout_key(7, 2, 0);
  *loss = m.forward(tok.data(), tgt.data(), B, T);
  m.backward(1.0f);
  return std::vector<float>(m.grads(), m.grads() + m.num_params());
}

}  // namespace

TEST(Operators, OwnOperatorsAreCalledPerLayerAndChangeNothing) {
  const GPTConfig cfg = testing_data::small_vocab_tiny();
  const int64_t B = 2, T = 8, L = cfg.n_layer;
  const auto tok = random_tokens(size_t(B * T), cfg.vocab_size, 1);
  const auto tgt = random_tokens(size_t(B * T), cfg.vocab_size, 2);
  GPT plain(cfg, B, T, nullptr, nullptr, {}, 0.1f);
  CountingOperators::Counts n;
  GPT counted(cfg, B, T, nullptr, nullptr, std::make_unique<CountingOperators>(&n), 0.1f);
  GPT tp1(cfg, B, T, nullptr, nullptr, braid::parallel::tensor::make_operators(nullptr, false), 0.1f);
  float l0 = 0, l1 = 0, l2 = 0;
  const auto g0 = step(plain, tok, tgt, B, T, &l0);
  const auto g1 = step(counted, tok, tgt, B, T, &l1);
  const auto g2 = step(tp1, tok, tgt, B, T, &l2);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(l0, l2);
  ASSERT_EQ(0, std::memcmp(g0.data(), g1.data(), g0.size() * sizeof(float)));
  ASSERT_EQ(0, std::memcmp(g0.data(), g2.data(), g0.size() * sizeof(float)));
  // One call per layer (and site), never per element: 2 dropouts a block in
  // forward and 2 in backward, plus the embedding's, once each way.
  EXPECT_EQ(n.attention_forward, L);
  EXPECT_EQ(n.attention_backward, L);
  EXPECT_EQ(n.norm_forward, 2 * L + 1);
  EXPECT_EQ(n.embedding_forward, 1);
  EXPECT_EQ(n.dropout, 2 * (2 * L + 1));
  // q, k, v are views into c_attn's packed output, by this rank's heads.
  EXPECT_EQ(n.ld, 3 * cfg.n_embd);
  EXPECT_EQ(n.heads, cfg.n_head);
  EXPECT_EQ(n.head_dim, cfg.n_embd / cfg.n_head);
  EXPECT_EQ(counted.operators().local_rows(), B * T);
  const auto& seq = counted.operators().sequence();
  EXPECT_EQ(seq.T_seq, T);
  ASSERT_EQ(seq.spans.size(), 1u);
  EXPECT_EQ(seq.spans[0].first, 0);
  EXPECT_EQ(seq.spans[0].count, T);
}

TEST(Operators, PlainAttentionNeedsPackedViews) {
  // The plain kernel reads c_attn's packed rows; other layouts are a strand's to handle.
  const int64_t B = 1, T = 2, NH = 2, hd = 2, Cl = NH * hd;
  std::vector<float> qkv(size_t(B * T * 3 * Cl), 0.5f), heads(size_t(3 * B * T * Cl)), scores(size_t(B * NH * T * T));
  std::vector<float> out(size_t(B * T * Cl)), scratch(4096);
  Operators ops;
  braid::model::OperatorWorkspace ws;
  ws.C = Cl;
  ws.attention = scratch.data();
  ops.bind(ws);
  ops.set_batch(B, T);
  const AttentionShape s{B, T, NH, hd};
  const AttentionSaved saved{heads.data(), scores.data()};
  const float* q = qkv.data();
  EXPECT_NO_THROW(ops.attention_forward(out.data(), saved, {q, q + Cl, q + 2 * Cl, 3 * Cl}, s));
  EXPECT_THROW(ops.attention_forward(out.data(), saved, {q, q + 2 * Cl, q + Cl, 3 * Cl}, s), braid::Error);
  EXPECT_THROW(ops.attention_forward(out.data(), saved, {q, q + Cl, q + 2 * Cl, 4 * Cl}, s), braid::Error);
}
