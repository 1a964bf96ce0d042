#include "braid/kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

namespace braid::kernels {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    const float m = s / float(C);
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v / float(C) + kLayerNormEps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel
  {
    // Input gradient: rows are independent.
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* d = dout + i * C;
      const float m = mean[i], r = rstd[i];
      float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t c = 0; c < C; ++c) {
        const float g = d[c] * weight[c];
        sg += g;
        sgx += g * (x[c] - m) * r;
      }
      sg /= float(C);
      sgx /= float(C);
      float* di = dinp + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * r;
        di[c] += r * (d[c] * weight[c] - sg - xhat * sgx);
      }
    }
    // Parameter gradients: threads own channel blocks, rows summed in order.
    const int64_t chunk = 32;
    const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
      for (int64_t i = 0; i < N; ++i) {
        const float* x = inp + i * C;
        const float* d = dout + i * C;
        const float m = mean[i], r = rstd[i];
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          dweight[c] += d[c] * (x[c] - m) * r;
          dbias[c] += d[c];
        }
      }
    }
  }
}

}  // namespace braid::kernels
