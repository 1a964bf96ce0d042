// Element types and conversions. bf16 and f16 are stored as uint16_t bit patterns;
// arithmetic happens in f32 (round-to-nearest-even on the way down).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "braid/core/error.h"

namespace braid {

enum class DType : uint8_t { f32, bf16, f16 };

inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

inline DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  throw ConfigError("unknown dtype '" + s + "'; use f32, bf16 or f16");
}

/// f32 -> bf16 with round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f16_to_f32 in integer and f32 arithmetic, bitwise the same for every input
/// (a NaN comes back quiet, as from vcvtph2ps): loops over it vectorise,
/// where GCC 12 leaves the _Float16 cast one scalar instruction per element.
inline float f16_to_f32_arith(uint16_t h) {
  const uint32_t em = h & 0x7fffu;
  // inf and NaN (quietened); normal (exponent rebiased from 15 to 127); subnormal (m x 2^-24, exact).
  const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13) | (uint32_t(em > 0x7c00u) << 22);
  const uint32_t normal = (em << 13) + (112u << 23);
  const float sub = float(int32_t(em)) * 0x1p-24f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  // Selected with masks, not branches, so that loops over it have no control flow.
  const uint32_t is_special = 0u - uint32_t(em >= 0x7c00u), is_sub = 0u - uint32_t(em < 0x0400u);
  uint32_t u = (special & is_special) | (sub_bits & is_sub) | (normal & ~(is_special | is_sub));
  u |= uint32_t(h & 0x8000u) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 -> binary16, round to nearest even, in integer and f32 arithmetic (F.
/// Giesen, "float_to_half_fast3_rtne"); NaNs become the canonical quiet NaN.
/// For compilers without _Float16 on this target (clang 14 on x86: the fuzz build).
inline uint16_t f32_to_f16_arith(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return static_cast<uint16_t>(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u < 0x38800000u) {  // subnormal or zero: the f32 adder rounds m x 2^-24 into the low bits
    float a;
    std::memcpy(&a, &u, 4);
    a += 0.5f;
    std::memcpy(&u, &a, 4);
    return static_cast<uint16_t>(sign | (u - 0x3f000000u));
  }
  u += 0xc8000fffu + ((u >> 13) & 1u);  // exponent rebiased (-112 << 23), rounding bias
  return static_cast<uint16_t>(sign | (u >> 13));
}

#ifdef __FLT16_MANT_DIG__
/// IEEE binary16 conversions (F16C instructions where the compiler has them).
inline uint16_t f32_to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

inline float f16_to_f32(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
#else
inline uint16_t f32_to_f16(float f) { return f32_to_f16_arith(f); }
inline float f16_to_f32(uint16_t u) { return f16_to_f32_arith(u); }
#endif

inline float load_as_f32(const void* p, size_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.f;
}

/// Calls f(load) with load(i) = element i of p (n, t) widened to f32: one
/// instantiation of f per dtype, so a loop over load(i) vectorises (a
/// per-element switch, as load_as_f32, does not). Returns what f returns.
template <typename F>
auto with_f32_loader(const void* p, DType t, F&& f) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  switch (t) {
    case DType::bf16: return f([h](int64_t i) { return bf16_to_f32(h[i]); });
    case DType::f16: return f([h](int64_t i) { return f16_to_f32_arith(h[i]); });
    case DType::f32: break;
  }
  const float* x = static_cast<const float*>(p);
  return f([x](int64_t i) { return x[i]; });
}

inline void store_from_f32(void* p, size_t i, DType t, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
  }
}

}  // namespace braid
