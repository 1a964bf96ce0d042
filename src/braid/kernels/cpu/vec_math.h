// Branch-free exp / tanh that GCC vectorises inside `#pragma omp simd` loops
// (glibc's expf/tanhf are scalar calls unless -ffast-math). Used by softmax,
// cross-entropy and GELU.
#pragma once
#include <bit>
#include <cstdint>

namespace braid::kernels {

/// e^x for fp32. Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a
/// degree-7 Taylor polynomial (truncation r^8/8! < 6e-9 relative, below fp32
/// epsilon); result scaled by 2^n through the exponent bits. Max error about
/// 2 ulp for x in [-87, 88]; inputs below -87 return ~0 (flushes to 2^-126
/// scale), above 88 are clamped (returns ~1.6e38, no inf). NaN is not handled.
inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest (ties to even) by adding and subtracting 1.5 * 2^23: unlike
  // roundevenf this is plain arithmetic, which GCC vectorises.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693145751953125f;  // ln2 high part (exact product)
  r = r - n * 1.42860682030941723212e-6f;  // ln2 low part
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

/// tanh(x) = sign(x) * (1 - 2 / (e^{2|x|} + 1)). Absolute error ~1e-7 (relative
/// error grows for |x| < 1e-3 through cancellation; GELU adds the result to 1,
/// so only the absolute error matters there).
inline float vtanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f - 2.0f / (vexp(2.0f * ax) + 1.0f);
  return x < 0.0f ? -t : t;
}

}  // namespace braid::kernels
