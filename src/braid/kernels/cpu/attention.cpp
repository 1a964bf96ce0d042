#include "braid/kernels/cpu/attention.h"

#include <cmath>
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

size_t attention_forward_scratch_floats(int64_t B, int64_t T, int64_t C) {
  return size_t(B * T * C);
}

size_t attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH) {
  return size_t(B * NH * T * T + 4 * B * T * C);
}

namespace {

// Copies between the token-major layout (B, T, nparts*C), heads inside each
// part, and the head-major one (nparts, B, NH, T, hs): to_heads = true splits
// src (token-major) into dst (head-major), false merges back.
void permute_heads(float* dst, const float* src, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t nparts,
                   bool to_heads) {
  const int64_t hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = (b * T + t) * nparts * C;
      for (int64_t p = 0; p < nparts; ++p)
        for (int64_t h = 0; h < NH; ++h) {
          const int64_t head = (((p * B + b) * NH + h) * T + t) * hs, token = tok + p * C + h * hs;
          std::memcpy(dst + (to_heads ? head : token), src + (to_heads ? token : head), sizeof(float) * size_t(hs));
        }
    }
}
void split_heads(float* dst, const float* src, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t nparts) {
  permute_heads(dst, src, B, T, C, NH, nparts, true);
}
void merge_heads(float* dst, const float* src, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t nparts) {
  permute_heads(dst, src, B, T, C, NH, nparts, false);
}

}  // namespace

void attention_forward(float* out, float* qkvr, float* att, float* scratch, const float* qkv,
                       int64_t B, int64_t T, int64_t C, int64_t NH) {
  BRAID_CHECK(NH > 0 && C % NH == 0, "attention: n_embd=", C, " not divisible by n_head=", NH);
  const int64_t hs = C / NH, BH = B * NH;
  const size_t part = size_t(B * T * C);
  float* q = qkvr;
  float* k = qkvr + part;
  float* v = qkvr + 2 * part;
  split_heads(qkvr, qkv, B, T, C, NH, 3);
  // att (BH, T, T) = q (BH, T, hs) @ k^T / sqrt(hs); the full square is computed
  // (one big batched GEMM beats skipping the masked half at these sizes).
  const float scale = 1.0f / std::sqrt(float(hs));
  gemm(false, true, T, T, hs, scale, q, k, 0.0f, att, nullptr, BH);
  // Causal softmax in place, row by row; masked entries become exactly 0.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      float* row = att + (bh * T + i) * T;
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
    }
  // y (BH, T, hs) = att (BH, T, T) @ v (BH, T, hs)
  gemm(false, false, T, hs, T, 1.0f, att, v, 0.0f, scratch, nullptr, BH);
  merge_heads(out, scratch, B, T, C, NH, 1);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkvr,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  BRAID_CHECK(NH > 0 && C % NH == 0, "attention: n_embd=", C, " not divisible by n_head=", NH);
  const int64_t hs = C / NH, BH = B * NH;
  const size_t part = size_t(B * T * C);
  const float* q = qkvr;
  const float* k = qkvr + part;
  const float* v = qkvr + 2 * part;
  float* datt = scratch;                       // (BH, T, T)
  float* dqkvr = scratch + size_t(BH * T * T);  // (3, BH, T, hs)
  float* dy = dqkvr + 3 * part;                 // (BH, T, hs)
  float* dq = dqkvr;
  float* dk = dqkvr + part;
  float* dv = dqkvr + 2 * part;
  split_heads(dy, dout, B, T, C, NH, 1);
  // dv (BH, T, hs) = att^T (BH, T, T) @ dy (BH, T, hs)
  gemm(true, false, T, hs, T, 1.0f, att, dy, 0.0f, dv, nullptr, BH);
  // datt (BH, T, T) = dy (BH, T, hs) @ v^T
  gemm(false, true, T, T, hs, 1.0f, dy, v, 0.0f, datt, nullptr, BH);
  // Softmax backward in place: dS = P * (dP - <dP, P>_row); masked P = 0 gives dS = 0.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      const float* p = att + (bh * T + i) * T;
      float* d = datt + (bh * T + i) * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j <= i; ++j) dot += p[j] * d[j];
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot);
      for (int64_t j = i + 1; j < T; ++j) d[j] = 0.0f;
    }
  const float scale = 1.0f / std::sqrt(float(hs));
  // dq (BH, T, hs) = dS (BH, T, T) @ k * scale;  dk = dS^T @ q * scale
  gemm(false, false, T, hs, T, scale, datt, k, 0.0f, dq, nullptr, BH);
  gemm(true, false, T, hs, T, scale, datt, q, 0.0f, dk, nullptr, BH);
  merge_heads(dqkv, dqkvr, B, T, C, NH, 3);
}

}  // namespace braid::kernels
