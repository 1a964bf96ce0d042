#include "braid/kernels/cpu/swiglu.h"

#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * H;
    const float* u = g + H;
    float* o = out + i * H;
#pragma omp simd
    for (int64_t c = 0; c < H; ++c) o[c] = g[c] / (1.0f + vexp(-g[c])) * u[c];
  }
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * H;
    const float* u = g + H;
    const float* d = dout + i * H;
    float* dg = dinp + i * 2 * H;
    float* du = dg + H;
#pragma omp simd
    for (int64_t c = 0; c < H; ++c) {
      const float s = 1.0f / (1.0f + vexp(-g[c]));
      dg[c] = d[c] * u[c] * s * (1.0f + g[c] * (1.0f - s));
      du[c] = d[c] * g[c] * s;
    }
  }
}

}  // namespace braid::kernels
