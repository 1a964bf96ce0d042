#include "braid/kernels/cpu/encoder.h"

#include <algorithm>

#include "braid/kernels/cpu/row_sum.h"

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
  add_rows_in_order([&](int64_t bt) { return dwte + int64_t(tokens[bt]) * C; }, dout, B * T, C);
  add_rows_in_order([&](int64_t bt) { return dwpe + (bt % T) * C; }, dout, B * T, C);
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
  add_rows_in_order(
      [&](int64_t i) -> float* {
        const int64_t r = int64_t(tokens[i]) - start;
        return r < 0 || r >= rows ? nullptr : dwte + r * C;
      },
      dout, N, C);
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
  add_rows_in_order([&](int64_t i) { return dwpe + ((row0 + i) % T) * C; }, dout, n, C);
}

}  // namespace braid::kernels
