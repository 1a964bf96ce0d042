#include "braid/kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention_layout.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

namespace {

using detail::elem_at;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr size_t kTileFloats = size_t(std::max(kQueryTile, kBackwardQueryTile) * kKeyTile);

// The calling thread's tile buffers: the scores / probabilities and dP in f32,
// and their rounded copies in the operand dtype (at most one float each).
// Allocated once per thread (OpenMP keeps its pool), like gemm's primitive cache.
struct TileBuffers {
  std::vector<float> s, dp, p_store, ds_store;
  std::vector<float> rows;  // a job's running state or a row widened to f32; grows to the largest asked
  float* row_floats(size_t n) {
    if (rows.size() < n) rows.resize(n);
    return rows.data();
  }
};
TileBuffers& tile_buffers() {
  thread_local TileBuffers tb{std::vector<float>(kTileFloats), std::vector<float>(kTileFloats),
                              std::vector<float>(kTileFloats), std::vector<float>(kTileFloats), {}};
  return tb;
}

// Keys of a key tile starting at position kp that query position qp sees.
int64_t visible_keys(int64_t qp, int64_t kp, int64_t nc) { return std::clamp<int64_t>(qp - kp + 1, 0, nc); }

// One tile of forward's online softmax: S (nr, nc) f32 scores -> P = exp(S -
// m') (0 where masked), stored rounded in `p`; m, l updated and o's rows
// rescaled by e^(m - m'). Row i is at query position qp0 + i, key 0 at kp.
void online_softmax_tile(float* S, void* p, const FlashState& st, int64_t nr, int64_t nc, int64_t hs, int64_t qp0,
                         int64_t kp, DType store, DType round) {
  for (int64_t i = 0; i < nr; ++i) {
    float* row = S + i * nc;
    const int64_t vis = visible_keys(qp0 + i, kp, nc);
    float mx = kNegInf;
    for (int64_t j = 0; j < vis; ++j) mx = std::max(mx, row[j]);
    const float m_old = st.m[i], m_new = std::max(m_old, mx);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < vis; ++j) {
      const float e = vexp(row[j] - m_new);
      row[j] = e;
      sum += e;
    }
    for (int64_t j = vis; j < nc; ++j) row[j] = 0.0f;
    detail::store_row(elem_at(p, size_t(i * nc), store), row, nc, store, round);
    if (vis == 0) continue;
    // m_old = -inf: nothing seen yet, o and l are 0.
    const float alpha = m_old == kNegInf ? 0.0f : vexp(m_old - m_new);
    st.l[i] = st.l[i] * alpha + sum;
    st.m[i] = m_new;
    if (alpha != 1.0f) {
      float* o = st.o + i * hs;
#pragma omp simd
      for (int64_t d = 0; d < hs; ++d) o[d] *= alpha;
    }
  }
}

// One tile of backward: S (nr, nc) scores -> P = exp(S - lse) in place (0 where
// masked), rounded into `p`. Row i at query position qp0 + i, key 0 at kp.
void recompute_probs(float* S, void* p, const float* lse, int64_t nr, int64_t nc, int64_t qp0, int64_t kp,
                     DType store, DType round) {
  for (int64_t i = 0; i < nr; ++i) {
    float* row = S + i * nc;
    const int64_t vis = visible_keys(qp0 + i, kp, nc);
    const float li = lse[i];
#pragma omp simd
    for (int64_t j = 0; j < vis; ++j) row[j] = vexp(row[j] - li);
    for (int64_t j = vis; j < nc; ++j) row[j] = 0.0f;
    detail::store_row(elem_at(p, size_t(i * nc), store), row, nc, store, round);
  }
}

// dS = P * (dP - D) in place in dP (0 where P is masked), rounded into `ds`.
void softmax_grad_tile(float* dP, const float* P, void* ds, const float* D, int64_t nr, int64_t nc, DType store,
                       DType round) {
  for (int64_t i = 0; i < nr; ++i) {
    float* d = dP + i * nc;
    const float* pr = P + i * nc;
    const float Di = D[i];
#pragma omp simd
    for (int64_t j = 0; j < nc; ++j) d[j] = pr[j] * (d[j] - Di);
    detail::store_row(elem_at(ds, size_t(i * nc), store), d, nc, store, round);
  }
}

}  // namespace

void flash_state_init(const FlashState& st, int64_t Tq, int64_t hs) {
  std::fill(st.o, st.o + Tq * hs, 0.0f);
  std::fill(st.m, st.m + Tq, kNegInf);
  std::fill(st.l, st.l + Tq, 0.0f);
}

void flash_forward_block(const FlashState& st, const void* q, const void* k, const void* v, DType store,
                         DType round, int64_t Tq, int64_t Tk, int64_t hs, int64_t q_pos, int64_t k_pos) {
  TileBuffers& tb = tile_buffers();
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int64_t r0 = 0; r0 < Tq; r0 += kQueryTile) {
    const int64_t nr = std::min(kQueryTile, Tq - r0), last_q = q_pos + r0 + nr - 1;
    const FlashState rows{st.o + r0 * hs, st.m + r0, st.l + r0};
    for (int64_t c0 = 0; c0 < Tk && k_pos + c0 <= last_q; c0 += kKeyTile) {
      const int64_t nc = std::min(kKeyTile, Tk - c0);
      gemm_typed(false, true, nr, nc, hs, scale, elem_at(q, size_t(r0 * hs), store),
                 elem_at(k, size_t(c0 * hs), store), store, 0.0f, tb.s.data());
      online_softmax_tile(tb.s.data(), tb.p_store.data(), rows, nr, nc, hs, q_pos + r0, k_pos + c0, store, round);
      gemm_typed(false, false, nr, hs, nc, 1.0f, tb.p_store.data(), elem_at(v, size_t(c0 * hs), store), store, 1.0f,
                 rows.o);
    }
  }
}

void flash_state_finish(float* out, int64_t ld_out, float* lse, const FlashState& st, int64_t Tq, int64_t hs) {
  for (int64_t i = 0; i < Tq; ++i) {
    BRAID_CHECK(st.l[i] > 0.0f, "flash attention: query row ", i, " saw no key (its position precedes every key)");
    const float inv = 1.0f / st.l[i];
    const float* o = st.o + i * hs;
    float* y = out + i * ld_out;
#pragma omp simd
    for (int64_t d = 0; d < hs; ++d) y[d] = o[d] * inv;
    lse[i] = st.m[i] + std::log(st.l[i]);
  }
}

void flash_backward_block(float* dq, float* dk, float* dv, const void* q, const void* k, const void* v,
                          const void* dO, const float* lse, const float* D, DType store, DType round, int64_t Tq,
                          int64_t Tk, int64_t hs, int64_t q_pos, int64_t k_pos) {
  TileBuffers& tb = tile_buffers();
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int64_t c0 = 0; c0 < Tk; c0 += kKeyTile) {
    const int64_t nc = std::min(kKeyTile, Tk - c0);
    const void* kt = elem_at(k, size_t(c0 * hs), store);
    const void* vt = elem_at(v, size_t(c0 * hs), store);
    for (int64_t r0 = 0; r0 < Tq; r0 += kBackwardQueryTile) {
      const int64_t nr = std::min(kBackwardQueryTile, Tq - r0);
      if (q_pos + r0 + nr - 1 < k_pos + c0) continue;  // every query of the tile precedes every key
      const void* qt = elem_at(q, size_t(r0 * hs), store);
      const void* dot = elem_at(dO, size_t(r0 * hs), store);
      gemm_typed(false, true, nr, nc, hs, scale, qt, kt, store, 0.0f, tb.s.data());
      recompute_probs(tb.s.data(), tb.p_store.data(), lse + r0, nr, nc, q_pos + r0, k_pos + c0, store, round);
      gemm_typed(true, false, nc, hs, nr, 1.0f, tb.p_store.data(), dot, store, 1.0f, dv + c0 * hs);
      gemm_typed(false, true, nr, nc, hs, 1.0f, dot, vt, store, 0.0f, tb.dp.data());
      softmax_grad_tile(tb.dp.data(), tb.s.data(), tb.ds_store.data(), D + r0, nr, nc, store, round);
      gemm_typed(false, false, nr, hs, nc, scale, tb.ds_store.data(), kt, store, 1.0f, dq + r0 * hs);
      gemm_typed(true, false, nc, hs, nr, scale, tb.ds_store.data(), qt, store, 1.0f, dk + c0 * hs);
    }
  }
}

size_t flash_attention_lse_floats(int64_t B, int64_t T, int64_t NH) { return size_t(B * NH * T); }

size_t flash_attention_backward_scratch_floats(int64_t B, int64_t T, const AttentionHeads& a, DType store) {
  const size_t qpart = size_t(B * T * a.q_width()), kvpart = size_t(B * T * a.kv_width());
  return 2 * qpart + 2 * kvpart + (store == DType::f32 ? 0 : (qpart + 1) / 2) + flash_attention_lse_floats(B, T, a.NH);
}

namespace {

void check_heads(const AttentionHeads& a, DType store, DType round) {
  detail::check_attention_dtypes(a.q_width(), a.NH, store, round);
  BRAID_CHECK(a.NKV > 0 && a.NH % a.NKV == 0, "attention: n_kv_head=", a.NKV, " must divide n_head=", a.NH);
}

// Element offsets of the head-major parts: q (B, NH, T, hs), then k and v (B,
// NKV, T, hs) each.
struct HeadMajor {
  size_t k, v;  // where k and v begin
  HeadMajor(int64_t B, int64_t T, const AttentionHeads& a)
      : k(size_t(B * T * a.q_width())), v(k + size_t(B * T * a.kv_width())) {}
};

}  // namespace

void permute_qkv(void* dst_v, const void* src_v, size_t esz, int64_t B, int64_t T, const AttentionHeads& a,
                 bool to_heads) {
  if (a.NKV == a.NH) return detail::permute_heads(dst_v, src_v, esz, B, T, a.q_width(), a.NH, 3, to_heads);
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
  const HeadMajor hm(B, T, a);
  const int64_t heads[3] = {a.NH, a.NKV, a.NKV};
  const int64_t col[3] = {0, a.q_width(), a.q_width() + a.kv_width()};
  const size_t base[3] = {0, hm.k, hm.v};
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int p = 0; p < 3; ++p)
        for (int64_t h = 0; h < heads[p]; ++h) {
          const size_t head = base[p] + size_t(((b * heads[p] + h) * T + t) * a.hs);
          const size_t token = size_t((b * T + t) * a.qkv_width() + col[p] + h * a.hs);
          std::memcpy(dst + (to_heads ? head : token) * esz, src + (to_heads ? token : head) * esz,
                      esz * size_t(a.hs));
        }
}

void flash_attention_forward(float* out, void* qkvr, float* lse, const void* qkv, DType store, int64_t B,
                             int64_t T, const AttentionHeads& a, DType round) {
  check_heads(a, store, round);
  const int64_t hs = a.hs, NH = a.NH, group = a.NH / a.NKV, C = a.q_width();
  const int64_t BH = B * NH, tiles = (T + kQueryTile - 1) / kQueryTile;
  const HeadMajor hm(B, T, a);
  permute_qkv(qkvr, qkv, dtype_size(store), B, T, a, true);
  const void* q = qkvr;
  const void* k = elem_at(qkvr, hm.k, store);
  const void* v = elem_at(qkvr, hm.v, store);
#pragma omp parallel
  {
    float* state = tile_buffers().row_floats(size_t(kQueryTile * (hs + 2)));
    const FlashState st{state, state + kQueryTile * hs, state + kQueryTile * (hs + 1)};
    // The last query tiles see the most keys: hand them out first.
#pragma omp for schedule(dynamic)
    for (int64_t job = 0; job < BH * tiles; ++job) {
      const int64_t bh = job / tiles, r0 = (tiles - 1 - job % tiles) * kQueryTile;
      const int64_t nr = std::min(kQueryTile, T - r0), b = bh / NH, h = bh % NH;
      const size_t head = size_t(bh * T * hs), kv_head = size_t((b * a.NKV + h / group) * T * hs);
      flash_state_init(st, nr, hs);
      flash_forward_block(st, elem_at(q, head + size_t(r0 * hs), store), elem_at(k, kv_head, store),
                          elem_at(v, kv_head, store), store, round, nr, r0 + nr, hs, r0, 0);
      flash_state_finish(out + (b * T + r0) * C + h * hs, C, lse + bh * T + r0, st, nr, hs);
    }
  }
}

void flash_attention_output_dot(float* D, const float* dout, const void* out, DType store, int64_t B, int64_t T,
                                int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
#pragma omp parallel
  {
    float* row = tile_buffers().row_floats(size_t(C));
#pragma omp for schedule(static)
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const float* g = dout + bt * C;
      with_f32_loader(elem_at(out, size_t(bt * C), store), store, [&](auto at) {
        for (int64_t c = 0; c < C; ++c) row[c] = at(c);
        return 0;
      });
      const int64_t b = bt / T, t = bt % T;
      for (int64_t h = 0; h < NH; ++h) {
        float s = 0.0f;
        for (int64_t d = h * hs; d < (h + 1) * hs; ++d) s += g[d] * row[d];
        D[(b * NH + h) * T + t] = s;
      }
    }
  }
}


void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const void* out, const void* qkvr,
                              const float* lse, DType store, int64_t B, int64_t T, const AttentionHeads& a,
                              DType round) {
  check_heads(a, store, round);
  const int64_t hs = a.hs, NH = a.NH, group = a.NH / a.NKV, C = a.q_width();
  const size_t qpart = size_t(B * T * C);
  const HeadMajor hm(B, T, a);
  const bool half = store != DType::f32;
  float* dy = scratch;                                          // (B, NH, T, hs) f32
  void* dy_s = half ? static_cast<void*>(dy + qpart) : dy;     // rounded, in store
  float* D = dy + qpart + (half ? (qpart + 1) / 2 : 0);         // (B, NH, T)
  float* dqkvr = D + B * NH * T;                                // dq, dk, dv head-major, f32
  detail::permute_heads(dy, dout, sizeof(float), B, T, C, NH, 1, true);
  detail::store_all(dy_s, dy, qpart, store, round);
  flash_attention_output_dot(D, dout, out, store, B, T, C, NH);
  std::fill(dqkvr, dqkvr + hm.v + size_t(B * T * a.kv_width()), 0.0f);
  const void* q = qkvr;
  const void* k = elem_at(qkvr, hm.k, store);
  const void* v = elem_at(qkvr, hm.v, store);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bg = 0; bg < B * a.NKV; ++bg) {
    const size_t kv_head = size_t(bg * T * hs);
    for (int64_t j = 0; j < group; ++j) {
      const int64_t bh = (bg / a.NKV) * NH + (bg % a.NKV) * group + j;
      const size_t head = size_t(bh * T * hs);
      flash_backward_block(dqkvr + head, dqkvr + hm.k + kv_head, dqkvr + hm.v + kv_head, elem_at(q, head, store),
                           elem_at(k, kv_head, store), elem_at(v, kv_head, store), elem_at(dy_s, head, store),
                           lse + bh * T, D + bh * T, store, round, T, T, hs, 0, 0);
    }
  }
  permute_qkv(dqkv, dqkvr, sizeof(float), B, T, a, false);
}

void flash_attention_forward(float* out, void* qkvr, float* lse, const void* qkv, DType store, int64_t B, int64_t T,
                             int64_t C, int64_t NH, DType round) {
  detail::check_attention_dtypes(C, NH, store, round);
  flash_attention_forward(out, qkvr, lse, qkv, store, B, T, mha_heads(C, NH), round);
}

void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const void* out, const void* qkvr,
                              const float* lse, DType store, int64_t B, int64_t T, int64_t C, int64_t NH,
                              DType round) {
  detail::check_attention_dtypes(C, NH, store, round);
  flash_attention_backward(dqkv, scratch, dout, out, qkvr, lse, store, B, T, mha_heads(C, NH), round);
}

}  // namespace braid::kernels
