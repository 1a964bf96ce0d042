#include "braid/kernels/cpu/crossentropy.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "braid/core/error.h"
#include "braid/kernels/cpu/for_rows.h"
#include "braid/kernels/cpu/vec_math.h"

namespace braid::kernels {

using detail::for_rows;

void softmax_crossentropy_forward(float* losses, float* lse, float* probs, const void* logits, DType dt,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  std::atomic<int64_t> bad_row{-1};
  for_rows(logits, dt, N, Vp, [&](int64_t i, auto at) {
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < V; ++v) mx = at(v) > mx ? at(v) : mx;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t v = 0; v < V; ++v) s += vexp(at(v) - mx);
    const float l = mx + std::log(s);
    lse[i] = l;
    if (probs) {
      float* p = probs + i * Vp;
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) p[v] = vexp(at(v) - l);
      for (int64_t v = V; v < Vp; ++v) p[v] = 0.0f;
    }
    if (targets) {
      const int32_t y = targets[i];
      if (y < 0 || y >= V) {
        bad_row.store(i);
        return;
      }
      losses[i] = l - at(y);
    }
  });
  const int64_t bad = bad_row.load();
  BRAID_CHECK(bad < 0, "target ", targets[bad], " at row ", bad, " is outside [0, ", V, ")");
}

void softmax_crossentropy_forward(float* losses, float* lse, float* probs, const float* logits,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  softmax_crossentropy_forward(losses, lse, probs, logits, DType::f32, targets, N, V, Vp);
}

void softmax_crossentropy_backward(float* dlogits, const void* logits, DType dt, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp) {
  BRAID_CHECK(targets != nullptr, "softmax_crossentropy_backward needs targets");
  // The whole vocabulary is one rank's slice starting at 0.
  vocab_parallel_crossentropy_backward(dlogits, logits, dt, lse, targets, 0, dloss, N, V, Vp);
}

void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp) {
  softmax_crossentropy_backward(dlogits, logits, DType::f32, lse, targets, dloss, N, V, Vp);
}

void vocab_parallel_max(float* rowmax, const void* logits, DType dt, int64_t N, int64_t Vl, int64_t Vpl) {
  for_rows(logits, dt, N, Vpl, [&](int64_t i, auto at) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < Vl; ++j) m = std::max(m, at(j));
    rowmax[i] = m;
  });
}

void vocab_parallel_max(float* rowmax, const float* logits, int64_t N, int64_t Vl, int64_t Vpl) {
  vocab_parallel_max(rowmax, logits, DType::f32, N, Vl, Vpl);
}

void vocab_parallel_sumexp(float* sums, float* target_logit, const void* logits, DType dt, const float* rowmax,
                           const int32_t* targets, int64_t start, int64_t N, int64_t Vl, int64_t Vpl) {
  for_rows(logits, dt, N, Vpl, [&](int64_t i, auto at) {
    const float mx = rowmax[i];
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t v = 0; v < Vl; ++v) s += vexp(at(v) - mx);
    sums[i] = s;
    if (targets) {
      const int64_t t = int64_t(targets[i]) - start;
      target_logit[i] = (t >= 0 && t < Vl) ? at(t) : 0.f;
    }
  });
}

void vocab_parallel_sumexp(float* sums, float* target_logit, const float* logits,
                           const float* rowmax, const int32_t* targets, int64_t start,
                           int64_t N, int64_t Vl, int64_t Vpl) {
  vocab_parallel_sumexp(sums, target_logit, logits, DType::f32, rowmax, targets, start, N, Vl, Vpl);
}

void vocab_parallel_crossentropy_backward(float* dlogits, const void* logits, DType dt, const float* lse,
                                          const int32_t* targets, int64_t start, float dloss, int64_t N,
                                          int64_t Vl, int64_t Vpl) {
  for_rows(logits, dt, N, Vpl, [&](int64_t i, auto at) {
    float* d = dlogits + i * Vpl;
    const float l = lse[i];
#pragma omp simd
    for (int64_t v = 0; v < Vl; ++v) d[v] = dloss * vexp(at(v) - l);
    for (int64_t v = Vl; v < Vpl; ++v) d[v] = 0.0f;
    const int64_t t = int64_t(targets[i]) - start;
    if (t >= 0 && t < Vl) d[t] -= dloss;
  });
}

void vocab_parallel_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                          const int32_t* targets, int64_t start, float dloss,
                                          int64_t N, int64_t Vl, int64_t Vpl) {
  vocab_parallel_crossentropy_backward(dlogits, logits, DType::f32, lse, targets, start, dloss, N, Vl, Vpl);
}

}  // namespace braid::kernels
