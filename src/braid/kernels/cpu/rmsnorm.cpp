#include "braid/kernels/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

namespace braid::kernels {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c] * x[c];
    const float r = 1.0f / std::sqrt(s / float(C) + eps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
    rstd[i] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel
  {
    // Input gradient: rows are independent.
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* d = dout + i * C;
      const float r = rstd[i];
      float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
      for (int64_t c = 0; c < C; ++c) sgx += d[c] * weight[c] * x[c] * r;
      sgx /= float(C);
      float* di = dinp + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) di[c] += r * (d[c] * weight[c] - x[c] * r * sgx);
    }
    // Weight gradient: threads own channel blocks, rows summed in order.
    const int64_t chunk = 32;
    const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
      for (int64_t i = 0; i < N; ++i) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        const float r = rstd[i];
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) dweight[c] += d[c] * x[c] * r;
      }
    }
  }
}

}  // namespace braid::kernels
