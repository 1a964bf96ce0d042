#include "braid/kernels/cpu/encoder.h"

#include <algorithm>

namespace braid::kernels {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* e = wte + int64_t(tokens[bt]) * C;
    const float* p = wpe + t * C;
    float* o = out + bt * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                      int64_t B, int64_t T, int64_t C) {
  const int64_t chunk = 32;
  const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t t = bt % T;
      const float* d = dout + bt * C;
      float* ge = dwte + int64_t(tokens[bt]) * C;
      float* gp = dwpe + t * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        ge[c] += d[c];
        gp[c] += d[c];
      }
    }
  }
}

void embedding_lookup_range(float* out, const int32_t* tokens, const float* wte, int64_t start,
                            int64_t rows, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = int64_t(tokens[i]) - start;
    float* o = out + i * C;
    if (r < 0 || r >= rows) {
      for (int64_t c = 0; c < C; ++c) o[c] = 0.f;
      continue;
    }
    const float* e = wte + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = e[c];
  }
}

void embedding_backward_range(float* dwte, const float* dout, const int32_t* tokens,
                              int64_t start, int64_t rows, int64_t N, int64_t C) {
  const int64_t chunk = 32;
  const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t r = int64_t(tokens[i]) - start;
      if (r < 0 || r >= rows) continue;
      const float* d = dout + i * C;
      float* g = dwte + r * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
    }
  }
}

void position_forward(float* out, const float* wpe, int64_t row0, int64_t n, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* p = wpe + ((row0 + i) % T) * C;
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += p[c];
  }
}

void position_backward(float* dwpe, const float* dout, int64_t row0, int64_t n, int64_t T, int64_t C) {
  const int64_t chunk = 32;
  const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
    for (int64_t i = 0; i < n; ++i) {
      const float* d = dout + i * C;
      float* g = dwpe + ((row0 + i) % T) * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
    }
  }
}

}  // namespace braid::kernels
