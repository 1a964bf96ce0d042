#include "braid/model/operators.h"

#include <algorithm>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/kernels/cpu/crossentropy.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/encoder.h"
#include "braid/kernels/cpu/layernorm.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/kernels/cpu/rmsnorm.h"

namespace braid::model {

namespace k = braid::kernels;

const void* Operators::packed_qkv(const AttentionInputs& in, const AttentionShape& s) {
  const int64_t Cl = s.heads * s.head_dim, KVl = s.kv() * s.head_dim;
  const size_t esz = dtype_size(s.store);
  const char* q = static_cast<const char*>(in.q);
  BRAID_CHECK(in.ld == s.qkv_width() && static_cast<const char*>(in.k) == q + size_t(Cl) * esz &&
                  static_cast<const char*>(in.v) == q + size_t(Cl + KVl) * esz,
              "attention: needs q, k, v packed as (B, T, ", Cl, " + 2 x ", KVl, "), got row stride ", in.ld);
  return q;
}

namespace {
k::AttentionHeads heads_of(const AttentionShape& s) { return {s.heads, s.kv(), s.head_dim}; }
}  // namespace

void Operators::bind(const OperatorWorkspace& ws) { ws_ = ws; }

bool Operators::fused_attention(int64_t max_T) const { return max_T >= k::kFusedAttentionMinT; }

void Operators::set_batch(int64_t B, int64_t T) {
  B_ = B, T_ = T, BT_ = B * T;
  rows_ = BT_, row0_ = 0;
  seq_.T_seq = T;
  seq_.spans.assign(1, TokenSpan{0, T});  // keeps its capacity: no allocation after the first call
}

void Operators::sum_replicated_grads(float*, size_t) {}

void Operators::column_forward(float* out, const void* in, const void* W, const float* b, int64_t K, int64_t Nl) {
  k::matmul_forward_typed(out, in, W, ws_.operands, b, BT_, K, Nl);
}

float* Operators::column_backward(float* din_full, float* dW, float* db, const void* dout, const void* in,
                                  const void* W, int64_t K, int64_t Nl) {
  k::matmul_backward_typed(din_full, dW, db, dout, in, W, ws_.operands, BT_, K, Nl, ws_.matmul);
  return din_full;
}

void Operators::column_weight_grad(float* dW, const void* dout, const void* in, int64_t K, int64_t Nl) {
  k::matmul_backward_typed(nullptr, dW, nullptr, dout, in, nullptr, ws_.operands, BT_, K, Nl, ws_.matmul);
}

void Operators::row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl, int64_t N) {
  k::matmul_forward_typed(out, in, W, ws_.operands, b, BT_, Kl, N);
}

void Operators::row_backward(float* din, float* dW, float* db, const void* dout_local, const void* in,
                             const void* W, int64_t Kl, int64_t N) {
  k::matmul_backward_typed(din, dW, db, dout_local, in, W, ws_.operands, BT_, Kl, N, ws_.matmul);
}

void Operators::row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl, int64_t N) {
  k::matmul_backward_typed(nullptr, dW, nullptr, dout_local, in, nullptr, ws_.operands, BT_, Kl, N, ws_.matmul);
}

void Operators::attention_forward(float* out, const AttentionSaved& saved, const AttentionInputs& qkv,
                                  const AttentionShape& s) {
  // The causal mask of the plain kernel is by position within the rank's tokens.
  BRAID_CHECK(seq_.spans.size() == 1 && seq_.spans[0].first == 0 && seq_.spans[0].count == s.T,
              "attention: the plain operator needs all ", s.T, " tokens of each sequence on this rank, in order");
  BRAID_CHECK(s.fused || s.kv() == s.heads, "attention: grouped-query heads need the fused kernel");
  if (!s.fused) {
    k::attention_forward(out, saved.heads, saved.lse, ws_.attention, packed_qkv(qkv, s), s.store, s.B, s.T,
                         s.heads * s.head_dim, s.heads, s.round);
    return;
  }
  k::flash_attention_forward(out, saved.heads, saved.lse, packed_qkv(qkv, s), s.store, s.B, s.T, heads_of(s),
                             s.round);
}

void Operators::attention_backward(const AttentionGrads& d, const float* dout, const AttentionSaved& saved,
                                   const AttentionShape& s) {
  const int64_t Cl = s.heads * s.head_dim, KVl = s.kv() * s.head_dim;
  BRAID_CHECK(d.ld == s.qkv_width() && d.dk == d.dq + Cl && d.dv == d.dq + Cl + KVl,
              "attention: the plain operator writes dq, dk, dv packed as (B, T, ", Cl, " + 2 x ", KVl, ")");
  BRAID_CHECK(s.fused || s.kv() == s.heads, "attention: grouped-query heads need the fused kernel");
  if (!s.fused) {
    k::attention_backward(d.dq, ws_.attention, dout, saved.heads, saved.lse, s.store, s.B, s.T, Cl, s.heads,
                          s.round);
    return;
  }
  BRAID_CHECK(saved.out != nullptr, "attention: backward needs the forward's output");
  k::flash_attention_backward(d.dq, ws_.attention, dout, saved.out, saved.heads, saved.lse, s.store, s.B, s.T,
                              heads_of(s), s.round);
}

bool Operators::whole_sequences() const {
  return seq_.spans.size() == 1 && seq_.spans[0].first == 0 && seq_.spans[0].count == T_;
}

void Operators::for_position_runs(const std::function<void(int64_t, int64_t, int64_t, int64_t)>& fn) const {
  // Local row r is (b, t) = (r / T, r % T); t walks the spans in order.
  int64_t r = row0_;
  const int64_t end = row0_ + rows_;
  while (r < end) {
    const int64_t b = r / T_;
    int64_t t = r % T_, span_start = 0;
    for (const TokenSpan& sp : seq_.spans) {
      if (t < span_start + sp.count) {
        const int64_t n = std::min(span_start + sp.count - t, end - r);
        fn(r - row0_, n, b, sp.first + (t - span_start));
        r += n;
        break;
      }
      span_start += sp.count;
    }
  }
}

void Operators::token_positions(int64_t* pos) const {
  int64_t t = 0;
  for (const TokenSpan& sp : seq_.spans)
    for (int64_t i = 0; i < sp.count; ++i) pos[t++] = sp.first + i;
}

void Operators::add_positions(float* out, const float* wpe) {
  if (!wpe) return;
  if (whole_sequences()) {
    k::position_forward(out, wpe, row0_, rows_, T_, ws_.C);
    return;
  }
  for_position_runs([&](int64_t i, int64_t n, int64_t, int64_t pos) {
    k::position_forward(out + i * ws_.C, wpe, pos, n, seq_.T_seq, ws_.C);
  });
}

void Operators::position_grads(float* dwpe, const float* dout) {
  if (!dwpe) return;
  if (whole_sequences()) {
    k::position_backward(dwpe, dout, row0_, rows_, T_, ws_.C);
    return;
  }
  for_position_runs([&](int64_t i, int64_t n, int64_t, int64_t pos) {
    k::position_backward(dwpe, dout + i * ws_.C, pos, n, seq_.T_seq, ws_.C);
  });
}

void Operators::dropout(float* out, const float* in, int64_t C, const DropoutKey& key) {
  if (whole_sequences()) {
    k::dropout(out, in, rows_, C, key.row_base + row0_, key.p, key.seed, key.stream);
    return;
  }
  // The single-rank run numbers token (b, position) as row b * T_seq + position.
  for_position_runs([&](int64_t i, int64_t n, int64_t b, int64_t pos) {
    k::dropout(out + i * C, in + i * C, n, C, key.row_base + b * seq_.T_seq + pos, key.p, key.seed, key.stream);
  });
}

void Operators::norm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                             const float* bias, int64_t C) {
  k::layernorm_forward(out, mean, rstd, x, weight, bias, rows_, C);
}

void Operators::norm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                              const float* weight, const float* mean, const float* rstd, int64_t C) {
  k::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, rows_, C);
}

void Operators::rms_norm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t C,
                                 float eps) {
  k::rmsnorm_forward(out, rstd, x, weight, rows_, C, eps);
}

void Operators::rms_norm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                                  const float* rstd, int64_t C) {
  k::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, rows_, C);
}

void Operators::embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                  int64_t Vp) {
  if (whole_sequences() && wpe) {
    k::encoder_forward(out, tokens, wte, wpe, B_, T_, ws_.C);
    return;
  }
  k::embedding_lookup_range(out, tokens, wte, 0, Vp, BT_, ws_.C);
  add_positions(out, wpe);
}

void Operators::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t Vp) {
  if (whole_sequences() && dwpe) {
    k::encoder_backward(dwte, dwpe, dout, tokens, B_, T_, ws_.C);
    return;
  }
  position_grads(dwpe, dout);
  k::embedding_backward_range(dwte, dout, tokens, 0, Vp, BT_, ws_.C);
}

void Operators::cross_entropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets,
                                      int64_t V, int64_t Vp) {
  k::softmax_crossentropy_forward(losses, lse, nullptr, logits, ws_.operands, targets, BT_, V, Vp);
}

void Operators::cross_entropy_backward(float* dlogits, const void* logits, const float* lse,
                                       const int32_t* targets, float scale, int64_t V, int64_t Vp) {
  k::softmax_crossentropy_backward(dlogits, logits, ws_.operands, lse, targets, scale, BT_, V, Vp);
}

}  // namespace braid::model
