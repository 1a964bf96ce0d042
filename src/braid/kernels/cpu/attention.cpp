#include "braid/kernels/cpu/attention.h"

#include <cmath>
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention_layout.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/for_rows.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

size_t attention_forward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH, DType store) {
  // f32: y (B, T, C); half: the f32 scores (B, NH, T, T) before it.
  return size_t(B * T * C) + (store == DType::f32 ? 0 : size_t(B * NH * T * T));
}

size_t attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH, DType store) {
  const size_t att = size_t(B * NH * T * T), btc = size_t(B * T * C);
  // half: dy and dS in `store` after the f32 ones.
  return att + 4 * btc + (store == DType::f32 ? 0 : (att + 1) / 2 + (btc + 1) / 2);
}

namespace detail {

// Copies between the token-major layout (B, T, nparts*C), heads inside each
// part, and the head-major one (nparts, B, NH, T, hs), elements of `esz`
// bytes: to_heads = true splits src (token-major) into dst (head-major), false
// merges back.
void permute_heads(void* dst_v, const void* src_v, size_t esz, int64_t B, int64_t T, int64_t C, int64_t NH,
                   int64_t nparts, bool to_heads) {
  const int64_t hs = C / NH;
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = (b * T + t) * nparts * C;
      for (int64_t p = 0; p < nparts; ++p)
        for (int64_t h = 0; h < NH; ++h) {
          const int64_t head = (((p * B + b) * NH + h) * T + t) * hs, token = tok + p * C + h * hs;
          std::memcpy(dst + size_t(to_heads ? head : token) * esz, src + size_t(to_heads ? token : head) * esz,
                      esz * size_t(hs));
        }
    }
}

void check_attention_dtypes(int64_t C, int64_t NH, DType store, DType round) {
  BRAID_CHECK(NH > 0 && C % NH == 0, "attention: n_embd=", C, " not divisible by n_head=", NH);
  BRAID_CHECK(store == DType::f32 || store == round, "attention: tensors stored in ", dtype_name(store),
              " cannot hold values rounded to ", dtype_name(round));
}

// dst (n, store) = src (n, f32) rounded to `round` (f32 rows round in place
// when dst == src). Serial: it runs per row inside the parallel loops. The
// scalar conversions are those convert.h's bulk casts match bitwise.
void store_row(void* dst, const float* src, int64_t n, DType store, DType round) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  float* d = static_cast<float*>(dst);
  if (store == DType::bf16) {
    for (int64_t j = 0; j < n; ++j) h[j] = f32_to_bf16(src[j]);
  } else if (store == DType::f16) {
    for (int64_t j = 0; j < n; ++j) h[j] = f32_to_f16(src[j]);
  } else if (round == DType::bf16) {
    for (int64_t j = 0; j < n; ++j) d[j] = bf16_to_f32(f32_to_bf16(src[j]));
  } else if (round == DType::f16) {
    for (int64_t j = 0; j < n; ++j) d[j] = f16_to_f32(f32_to_f16(src[j]));
  } else if (d != src) {
    std::memcpy(d, src, size_t(n) * sizeof(float));
  }
}

// store_row over a whole buffer, spread over the OpenMP team.
void store_all(void* dst, float* src, size_t n, DType store, DType round) {
  if (store != DType::f32) {
    cast_from_f32(dst, store, src, n);
    return;
  }
  if (dst != src) std::memcpy(dst, src, n * sizeof(float));
  round_to_dtype(static_cast<float*>(dst), round, n);
}

}  // namespace detail

namespace {
using detail::check_attention_dtypes;
using detail::permute_heads;
using detail::store_all;
using detail::store_row;
const char* at(const void* p, size_t elems, DType t) { return detail::elem_at(p, elems, t); }
char* at(void* p, size_t elems, DType t) { return detail::elem_at(p, elems, t); }
}  // namespace

void attention_forward(float* out, void* qkvr, void* att, float* scratch, const void* qkv, DType store, int64_t B,
                       int64_t T, int64_t C, int64_t NH, DType round) {
  check_attention_dtypes(C, NH, store, round);
  const int64_t hs = C / NH, BH = B * NH;
  const size_t part = size_t(B * T * C);
  const bool half = store != DType::f32;
  const void* q = qkvr;
  const void* k = at(qkvr, part, store);
  const void* v = at(qkvr, 2 * part, store);
  permute_heads(qkvr, qkv, dtype_size(store), B, T, C, NH, 3, true);
  // Scores (BH, T, T) = q (BH, T, hs) @ k^T / sqrt(hs): in att itself in f32,
  // else in scratch; the full square is computed (one big batched GEMM beats
  // skipping the masked half at these sizes).
  float* y = scratch;
  float* sc = half ? scratch + part : static_cast<float*>(att);
  const float scale = 1.0f / std::sqrt(float(hs));
  gemm_typed(false, true, T, T, hs, scale, q, k, store, 0.0f, sc, nullptr, BH);
  // Causal softmax row by row in f32; masked entries become exactly 0. The
  // stored (rounded) probabilities are what y and backward use.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = sc + (bh * T + i) * T;
      float mx = row[0];
      for (int64_t j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j <= i; ++j) {
        const float e = vexp(row[j] - mx);
        row[j] = e;
        s += e;
      }
      const float inv = 1.0f / s;
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
      for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      if (half || round != DType::f32) store_row(at(att, size_t((bh * T + i) * T), store), row, T, store, round);
    }
  // y (BH, T, hs) = att (BH, T, T) @ v (BH, T, hs)
  gemm_typed(false, false, T, hs, T, 1.0f, att, v, store, 0.0f, y, nullptr, BH);
  permute_heads(out, y, sizeof(float), B, T, C, NH, 1, false);
}

void attention_forward(float* out, float* qkvr, float* att, float* scratch, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH) {
  attention_forward(out, qkvr, att, scratch, qkv, DType::f32, B, T, C, NH);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkvr, const void* att,
                        DType store, int64_t B, int64_t T, int64_t C, int64_t NH, DType round) {
  check_attention_dtypes(C, NH, store, round);
  const int64_t hs = C / NH, BH = B * NH;
  const size_t part = size_t(B * T * C), natt = size_t(BH * T * T);
  const bool half = store != DType::f32;
  const void* q = qkvr;
  const void* k = at(qkvr, part, store);
  const void* v = at(qkvr, 2 * part, store);
  float* datt = scratch;             // (BH, T, T)
  float* dqkvr = scratch + natt;     // (3, BH, T, hs)
  float* dy = dqkvr + 3 * part;      // (BH, T, hs)
  float* dq = dqkvr;
  float* dk = dqkvr + part;
  float* dv = dqkvr + 2 * part;
  // The output gradients of the products (dy, dS) enter them rounded to `round`,
  // stored in `store`: in place in f32, else after the f32 buffers.
  void* dy_s = half ? static_cast<void*>(dy + part) : dy;
  void* ds_s = half ? static_cast<void*>(at(dy_s, part, store)) : datt;
  permute_heads(dy, dout, sizeof(float), B, T, C, NH, 1, true);
  store_all(dy_s, dy, part, store, round);
  // dv (BH, T, hs) = att^T (BH, T, T) @ dy (BH, T, hs)
  gemm_typed(true, false, T, hs, T, 1.0f, att, dy_s, store, 0.0f, dv, nullptr, BH);
  // datt (BH, T, T) = dy (BH, T, hs) @ v^T
  gemm_typed(false, true, T, T, hs, 1.0f, dy_s, v, store, 0.0f, datt, nullptr, BH);
  // Softmax backward in place: dS = P * (dP - <dP, P>_row); masked P = 0 gives dS = 0.
  detail::for_rows(att, store, BH * T, T, [&](int64_t r, auto p_at) {
    const int64_t i = r % T;  // the query position: row r has i + 1 unmasked entries
    float* d = datt + r * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= i; ++j) dot += p_at(j) * d[j];
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j) d[j] = p_at(j) * (d[j] - dot);
    for (int64_t j = i + 1; j < T; ++j) d[j] = 0.0f;
    if (half || round != DType::f32) store_row(at(ds_s, size_t(r * T), store), d, T, store, round);
  });
  const float scale = 1.0f / std::sqrt(float(hs));
  // dq (BH, T, hs) = dS (BH, T, T) @ k * scale;  dk = dS^T @ q * scale
  gemm_typed(false, false, T, hs, T, scale, ds_s, k, store, 0.0f, dq, nullptr, BH);
  gemm_typed(true, false, T, hs, T, scale, ds_s, q, store, 0.0f, dk, nullptr, BH);
  permute_heads(dqkv, dqkvr, sizeof(float), B, T, C, NH, 3, false);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkvr, const float* att,
                        int64_t B, int64_t T, int64_t C, int64_t NH) {
  attention_backward(dqkv, scratch, dout, qkvr, att, DType::f32, B, T, C, NH);
}

}  // namespace braid::kernels
