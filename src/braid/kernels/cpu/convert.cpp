#include "braid/kernels/cpu/convert.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "braid/core/error.h"
#include "braid/kernels/cpu/for_chunks.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define BRAID_CONVERT_AVX512 1
#else
#define BRAID_CONVERT_AVX512 0
#endif

namespace braid::kernels {
namespace {

using detail::for_chunks;
using detail::kChunk;
using detail::run_serial;

// bf16 and the finiteness test are plain loops over the scalar integer recipes:
// GCC vectorises them itself (AVX-512 with vpermt2w packing under
// -march=native), measured 1.5-2x faster in cache than hand-written intrinsics
// using vpmovdw, and identical to dtype.h by construction. Deliberately NOT
// vcvtneps2bf16 (AVX512_BF16): it flushes f32 denormals to +-0 where
// f32_to_bf16 rounds them (0x007fffff -> 0x0080), breaking bitwise identity.
void bf16_from_f32(uint16_t* d, const float* s, size_t m) {
  for (size_t i = 0; i < m; ++i) d[i] = f32_to_bf16(s[i]);
}

void f32_from_bf16(float* d, const uint16_t* s, size_t m) {
  for (size_t i = 0; i < m; ++i) d[i] = bf16_to_f32(s[i]);
}

void round_bf16(float* x, size_t m) {
  for (size_t i = 0; i < m; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// Non-finite <=> exponent field all ones; tested on the bits so it holds under
// -ffast-math and raises no FP exceptions. No early exit: it would stop the loop
// vectorising, and the all-finite case (the common one) reads everything anyway.
bool any_nonfinite(const float* x, size_t m) {
  constexpr uint32_t kExp = 0x7f800000u;
  uint32_t found = 0;
  for (size_t i = 0; i < m; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    found |= uint32_t((u & kExp) == kExp);
  }
  return found != 0;
}

// f16 needs intrinsics: GCC 12 does not vectorise _Float16 <-> float casts (one
// scalar vcvtps2ph per element; measured 1.6x (DRAM) to 4x (cache) slower).
// vcvtps2ph / vcvtph2ps are the instructions the scalar casts compile to, so
// the results agree bit for bit, NaN payloads included.
#if BRAID_CONVERT_AVX512
// _MM_FROUND_CUR_DIRECTION: the immediate GCC emits for the scalar
// static_cast<_Float16>(float), so vector and scalar agree even if MXCSR were
// changed (braid never changes it; the default mode is round-to-nearest-even).
constexpr int kF16Round = _MM_FROUND_CUR_DIRECTION;

// The zero-masked forms with an all-ones mask are the same instructions; the
// unmasked intrinsics start from _mm*_undefined_*, which GCC 12 flags with a
// false -Wmaybe-uninitialized once inlined into the OpenMP outlined functions.
inline __m256i cvt_ps_ph(__m512 v) {
  return _mm512_maskz_cvtps_ph(__mmask16(0xffff), v, kF16Round);
}
inline __m512 cvt_ph_ps(__m256i h) { return _mm512_maskz_cvtph_ps(__mmask16(0xffff), h); }
#endif

void f16_from_f32(uint16_t* d, const float* s, size_t m) {
  size_t i = 0;
#if BRAID_CONVERT_AVX512
  for (; i + 16 <= m; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), cvt_ps_ph(_mm512_loadu_ps(s + i)));
#endif
  for (; i < m; ++i) d[i] = f32_to_f16(s[i]);
}

void f32_from_f16(float* d, const uint16_t* s, size_t m) {
  size_t i = 0;
#if BRAID_CONVERT_AVX512
  for (; i + 16 <= m; i += 16)
    _mm512_storeu_ps(d + i, cvt_ph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
#endif
  for (; i < m; ++i) d[i] = f16_to_f32(s[i]);
}

void round_f16(float* x, size_t m) {
  size_t i = 0;
#if BRAID_CONVERT_AVX512
  for (; i + 16 <= m; i += 16)
    _mm512_storeu_ps(x + i, cvt_ph_ps(cvt_ps_ph(_mm512_loadu_ps(x + i))));
#endif
  for (; i < m; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

}  // namespace

void cast_from_f32(void* dst, DType dst_type, const float* src, size_t n) {
  auto* d16 = static_cast<uint16_t*>(dst);
  switch (dst_type) {
    case DType::f32:
      for_chunks(n, [&](size_t b, size_t e) {
        std::memcpy(static_cast<float*>(dst) + b, src + b, (e - b) * sizeof(float));
      });
      return;
    case DType::bf16:
      for_chunks(n, [&](size_t b, size_t e) { bf16_from_f32(d16 + b, src + b, e - b); });
      return;
    case DType::f16:
      for_chunks(n, [&](size_t b, size_t e) { f16_from_f32(d16 + b, src + b, e - b); });
      return;
  }
  BRAID_CHECK(false, "cast_from_f32: unknown dtype ", int(dst_type));
}

namespace {
// dst (m, f32) = src (m, t) widened by one serial run of the loops above.
void widen_run(float* dst, const void* src, DType t, size_t m) {
  switch (t) {
    case DType::f32: std::memcpy(dst, src, m * sizeof(float)); return;
    case DType::bf16: f32_from_bf16(dst, static_cast<const uint16_t*>(src), m); return;
    case DType::f16: f32_from_f16(dst, static_cast<const uint16_t*>(src), m); return;
  }
}

bool known(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
}  // namespace

void cast_to_f32(float* dst, const void* src, DType src_type, size_t n) {
  BRAID_CHECK(known(src_type), "cast_to_f32: unknown dtype ", int(src_type));
  const size_t esz = dtype_size(src_type);
  for_chunks(n, [&](size_t b, size_t e) {
    widen_run(dst + b, static_cast<const char*>(src) + b * esz, src_type, e - b);
  });
}

void cast_rows_to_f32(float* dst, const void* src, DType src_type, size_t rows, size_t cols, size_t ld) {
  BRAID_CHECK(ld >= cols, "cast_rows_to_f32: row stride ", ld, " below the ", cols, " columns");
  if (ld == cols) return cast_to_f32(dst, src, src_type, rows * cols);
  BRAID_CHECK(known(src_type), "cast_rows_to_f32: unknown dtype ", int(src_type));
  const auto* s = static_cast<const char*>(src);
  const size_t esz = dtype_size(src_type);
  const int64_t n = int64_t(rows);
  const bool serial = run_serial(int64_t(rows * cols / kChunk));
#pragma omp parallel for schedule(static) if (!serial)
  for (int64_t r = 0; r < n; ++r) widen_run(dst + size_t(r) * cols, s + size_t(r) * ld * esz, src_type, cols);
}

void round_to_dtype(float* x, DType t, size_t n) {
  switch (t) {
    case DType::f32:
      return;
    case DType::bf16:
      for_chunks(n, [&](size_t b, size_t e) { round_bf16(x + b, e - b); });
      return;
    case DType::f16:
      for_chunks(n, [&](size_t b, size_t e) { round_f16(x + b, e - b); });
      return;
  }
  BRAID_CHECK(false, "round_to_dtype: unknown dtype ", int(t));
}

bool has_nonfinite(const float* x, size_t n) {
  const int64_t nchunks = int64_t((n + kChunk - 1) / kChunk);
  if (run_serial(nchunks)) return n > 0 && any_nonfinite(x, n);
  bool found = false;
#pragma omp parallel for schedule(static) reduction(|| : found)
  for (int64_t c = 0; c < nchunks; ++c) {
    const size_t b = size_t(c) * kChunk;
    found = found || any_nonfinite(x + b, std::min(n, b + kChunk) - b);
  }
  return found;
}

// dst (n, dt) = src (n, st).
void copy_cast(void* dst, DType dt, const void* src, DType st, size_t n) {
  if (n == 0) return;
  if (dt == st) {
    std::memcpy(dst, src, n * dtype_size(dt));
  } else if (st == DType::f32) {
    kernels::cast_from_f32(dst, dt, static_cast<const float*>(src), n);
  } else if (dt == DType::f32) {
    kernels::cast_to_f32(static_cast<float*>(dst), src, st, n);
  } else {
    for (size_t i = 0; i < n; ++i) store_from_f32(dst, i, dt, load_as_f32(src, i, st));
  }
}

// dst (n, dt) += src (n, st), in f32 arithmetic.
void accumulate_cast(void* dst, DType dt, const void* src, DType st, size_t n) {
  const int64_t N = static_cast<int64_t>(n);
  if (dt == DType::f32 && st == DType::f32) {
    float* d = static_cast<float*>(dst);
    const float* s = static_cast<const float*>(src);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) d[i] += s[i];
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const size_t k = static_cast<size_t>(i);
    store_from_f32(dst, k, dt, load_as_f32(dst, k, dt) + load_as_f32(src, k, st));
  }
}

}  // namespace braid::kernels
