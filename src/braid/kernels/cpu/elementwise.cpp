#include "braid/kernels/cpu/elementwise.h"

#include <cstring>

#include "braid/core/rng.h"

#include "braid/kernels/cpu/for_chunks.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
}  // namespace

void gelu_forward(float* out, const void* inp, DType dt, int64_t N) {
  with_f32_loader(inp, dt, [&](auto x_at) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float x = x_at(i);
      const float t = vtanh(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
      out[i] = 0.5f * x * (1.0f + t);
    }
  });
}

void gelu_forward(float* out, const float* inp, int64_t N) { gelu_forward(out, inp, DType::f32, N); }

void gelu_backward(float* dinp, const float* dout, const void* inp, DType dt, int64_t N) {
  with_f32_loader(inp, dt, [&](auto x_at) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float x = x_at(i);
      const float t = vtanh(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
      const float dt_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoef * x * x);
      dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt_dx);
    }
  });
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N) {
  gelu_backward(dinp, dout, inp, DType::f32, N);
}

void residual_forward(float* out, const float* inp1, const void* inp2, DType dt, int64_t N) {
  with_f32_loader(inp2, dt, [&](auto b_at) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) out[i] = inp1[i] + b_at(i);
  });
}

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N) {
  residual_forward(out, inp1, inp2, DType::f32, N);
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

void bias_forward(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void dropout(float* out, const float* in, int64_t n, int64_t C, int64_t row0, float p,
             uint64_t seed, uint64_t stream) {
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t base = uint64_t(row0 + i) * uint64_t(C);
    for (int64_t c = 0; c < C; ++c) {
      const bool keep = rand_uniform(seed, stream, base + uint64_t(c)) >= p;
      out[i * C + c] = keep ? in[i * C + c] * scale : 0.0f;
    }
  }
}

void fill_zero(void* dst, size_t bytes) {
  char* d = static_cast<char*>(dst);
  detail::for_chunks(bytes, [d](size_t b, size_t e) { std::memset(d + b, 0, e - b); });
}

}  // namespace braid::kernels
