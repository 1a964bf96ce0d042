#include "braid/kernels/cpu/swiglu.h"

#include <algorithm>

#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

namespace {
// One chunk of a row: gate g, up u (n each, f32) into o.
inline void swiglu_chunk(float* o, const float* g, const float* u, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) o[c] = g[c] / (1.0f + vexp(-g[c])) * u[c];
}
inline void swiglu_grad_chunk(float* dg, float* du, const float* d, const float* g, const float* u, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    const float s = 1.0f / (1.0f + vexp(-g[c]));
    dg[c] = d[c] * u[c] * s * (1.0f + g[c] * (1.0f - s));
    du[c] = d[c] * g[c] * s;
  }
}
constexpr int64_t kChunk = 256;  // features widened at a time (2 KB of stack)
}  // namespace

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * H;
    const float* u = g + H;
    swiglu_chunk(out + i * H, g, u, H);
  }
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * H;
    const float* u = g + H;
    const float* d = dout + i * H;
    float* dg = dinp + i * 2 * H;
    swiglu_grad_chunk(dg, dg + H, d, g, u, H);
  }
}

namespace {
// Calls f(i, c0, n, g, u) for every chunk of every row of inp (N, 2H) stored in
// dt: g and u the chunk's gate and up features widened to f32 (n of each,
// from feature c0), rows spread over the OpenMP team.
template <typename F>
void for_widened_chunks(const void* inp, DType dt, int64_t N, int64_t H, F&& f) {
  const char* base = static_cast<const char*>(inp);
  const size_t esz = dtype_size(dt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float g[kChunk], u[kChunk];
    for (int64_t c0 = 0; c0 < H; c0 += kChunk) {
      const int64_t n = std::min(kChunk, H - c0);
      cast_to_f32(g, base + size_t(i * 2 * H + c0) * esz, dt, size_t(n));
      cast_to_f32(u, base + size_t(i * 2 * H + H + c0) * esz, dt, size_t(n));
      f(i, c0, n, g, u);
    }
  }
}
}  // namespace

void swiglu_forward(float* out, const void* inp, DType dt, int64_t N, int64_t H) {
  if (dt == DType::f32) return swiglu_forward(out, static_cast<const float*>(inp), N, H);
  for_widened_chunks(inp, dt, N, H, [&](int64_t i, int64_t c0, int64_t n, const float* g, const float* u) {
    swiglu_chunk(out + i * H + c0, g, u, n);
  });
}

void swiglu_backward(float* dinp, const float* dout, const void* inp, DType dt, int64_t N, int64_t H) {
  if (dt == DType::f32) return swiglu_backward(dinp, dout, static_cast<const float*>(inp), N, H);
  for_widened_chunks(inp, dt, N, H, [&](int64_t i, int64_t c0, int64_t n, const float* g, const float* u) {
    float* dg = dinp + i * 2 * H + c0;
    swiglu_grad_chunk(dg, dg + H, dout + i * H + c0, g, u, n);
  });
}

}  // namespace braid::kernels
