// Bulk conversions (kernels/cpu/convert.h) against the scalar dtype.h functions,
// bitwise, on every half bit pattern, on hand-picked edge values and on 1e6
// random values; has_nonfinite with the bad value at every kind of position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/convert.h"

namespace braid::kernels {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Sets the OpenMP thread count for one scope, so the chunked parallel path runs
// even under ctest's OMP_NUM_THREADS=1.
struct OmpThreads {
  int saved = braid::omp_threads();
  explicit OmpThreads(int n) { braid::set_omp_threads(n); }
  ~OmpThreads() { braid::set_omp_threads(saved); }
};

uint16_t scalar_from_f32(DType t, float f) {
  return t == DType::bf16 ? f32_to_bf16(f) : f32_to_f16(f);
}
float scalar_to_f32(DType t, uint16_t h) {
  return t == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Edge values for both half formats: signed zeros, f32/bf16/f16 denormals and
// their boundaries, max finite values, the f16 overflow threshold, ties.
std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {
      0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
      -std::numeric_limits<float>::quiet_NaN(),
      from_bits(0x7f800001u),  // signalling NaN, low payload only
      from_bits(0xff800001u), from_bits(0x7fc00001u), from_bits(0x7fbfffffu),
      from_bits(0x7f810000u),  // sNaN whose payload survives truncation to bf16
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(), from_bits(0x007fffffu), from_bits(0x00400000u),
      from_bits(0x00018000u), from_bits(0x00008000u), from_bits(0x80008001u),
      // bf16 ties (exactly half an ulp) to even and just off the tie
      from_bits(0x3f808000u), from_bits(0x3f818000u), from_bits(0x3f808001u),
      from_bits(0x3f807fffu), from_bits(0x7f7f8000u), from_bits(0x7f7fffffu),
      // f16: max finite, overflow threshold, denormals, ties
      65504.0f, -65504.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e10f, std::ldexp(1.0f, -14),
      std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::ldexp(1.0f, -26),
      std::ldexp(3.0f, -25), std::ldexp(1.0f, -15), 1.0f + std::ldexp(1.0f, -11),
      1.0f + std::ldexp(3.0f, -11), 1.0f + std::ldexp(1.0f, -12), 2049.0f, 2051.0f, 0.1f,
      -3.14159f};
  return v;
}

// n random values: a third random bit patterns (every exponent, NaNs, denormals),
// a third spread over exponents -30..20 (the f16 range and beyond), a third near
// half-ulp ties (low mantissa bits forced to the bf16 / f16 tie patterns).
std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> u32;
  std::uniform_int_distribution<int> expo(-30, 20);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    switch (i % 3) {
      case 0:
        v[i] = from_bits(u32(rng));
        break;
      case 1:
        v[i] = std::ldexp(mant(rng), expo(rng)) * ((u32(rng) & 1) ? -1.f : 1.f);
        break;
      default: {
        uint32_t b = bits(std::ldexp(mant(rng), expo(rng)));
        b = (u32(rng) & 1) ? ((b & ~0xffffu) | 0x8000u) : ((b & ~0x1fffu) | 0x1000u);
        v[i] = from_bits(b);
      }
    }
  }
  return v;
}

void expect_cast_matches_scalar(DType t, const std::vector<float>& src) {
  std::vector<uint16_t> out(src.size() + 1, 0xabcd);
  cast_from_f32(out.data(), t, src.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(out[i], scalar_from_f32(t, src[i]))
        << dtype_name(t) << " i=" << i << " x=" << src[i] << " bits=0x" << std::hex << bits(src[i]);
  EXPECT_EQ(out[src.size()], 0xabcd) << "wrote past n";
}

TEST(Convert, HalfToF32AllBitPatterns) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = uint16_t(i);
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<float> out(65536);
    cast_to_f32(out.data(), h.data(), t, h.size());
    for (uint32_t i = 0; i < 65536; ++i)
      ASSERT_EQ(bits(out[i]), bits(scalar_to_f32(t, uint16_t(i))))
          << dtype_name(t) << " pattern 0x" << std::hex << i;
    if (t == DType::f16) {  // the vectorisable recipe the f16 loaders use
      for (uint32_t i = 0; i < 65536; ++i)
        ASSERT_EQ(bits(braid::f16_to_f32_arith(uint16_t(i))), bits(out[i])) << "arith pattern 0x" << std::hex << i;
    }
    // Widening is exact, so half -> f32 -> half is the identity except that
    // signalling NaNs come back quiet.
    std::vector<uint16_t> back(65536);
    cast_from_f32(back.data(), t, out.data(), out.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      if (std::isnan(out[i])) continue;
      ASSERT_EQ(back[i], uint16_t(i)) << dtype_name(t) << " pattern 0x" << std::hex << i;
    }
  }
}

TEST(Convert, F32ToHalfEdgeValuesMatchScalar) {
  const auto v = edge_values();
  for (DType t : {DType::bf16, DType::f16}) expect_cast_matches_scalar(t, v);
}

// Known answers, so a wrong scalar function cannot hide behind the comparison.
TEST(Convert, F32ToHalfKnownAnswers) {
  struct Case {
    float x;
    uint16_t bf16, f16;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {1.0f, 0x3f80, 0x3c00},
      {inf, 0x7f80, 0x7c00},
      {-inf, 0xff80, 0xfc00},
      {65504.0f, 0x4780, 0x7bff},                      // f16 max finite
      {65520.0f, 0x4780, 0x7c00},                      // halfway to 2^16: f16 rounds to inf
      {65519.996f, 0x4780, 0x7bff},                    // just below: stays finite
      {std::ldexp(1.0f, -24), 0x3380, 0x0001},         // f16 smallest denormal
      {std::ldexp(1.0f, -25), 0x3300, 0x0000},         // tie between 0 and 2^-24: even is 0
      {std::ldexp(3.0f, -25), 0x33c0, 0x0002},         // tie between 1 and 2 ulps: even is 2
      {1.0f + std::ldexp(1.0f, -11), 0x3f80, 0x3c00},  // f16 tie to even (down)
      {1.0f + std::ldexp(3.0f, -11), 0x3f80, 0x3c02},  // f16 tie to even (up)
      {from_bits(0x3f808000u), 0x3f80, 0x3c04},        // 1 + 2^-8: bf16 tie to even (down)
      {from_bits(0x3f818000u), 0x3f82, 0x3c0c},        // 1 + 3*2^-8: bf16 tie to even (up)
      {from_bits(0x007fffffu), 0x0080, 0x0000},        // f32 denormal rounds up into bf16 normal
      {from_bits(0x00018000u), 0x0002, 0x0000},        // bf16 denormal tie, rounded not flushed
      {std::numeric_limits<float>::max(), 0x7f80, 0x7c00},
  };
  for (const Case& c : cases) {
    uint16_t b = 0, h = 0;
    cast_from_f32(&b, DType::bf16, &c.x, 1);
    cast_from_f32(&h, DType::f16, &c.x, 1);
    EXPECT_EQ(b, c.bf16) << "bf16 of 0x" << std::hex << bits(c.x);
    EXPECT_EQ(h, c.f16) << "f16 of 0x" << std::hex << bits(c.x);
  }
  // NaN stays NaN (quiet) in both formats, with either sign.
  for (uint32_t nb : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu}) {
    const float x = from_bits(nb);
    uint16_t b = 0, h = 0;
    cast_from_f32(&b, DType::bf16, &x, 1);
    cast_from_f32(&h, DType::f16, &x, 1);
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nb << " -> " << b;
    EXPECT_TRUE(std::isnan(f16_to_f32(h))) << std::hex << nb << " -> " << h;
    EXPECT_EQ(b >> 15, nb >> 31);
    EXPECT_EQ(h >> 15, nb >> 31);
  }
}

TEST(Convert, F32ToHalfRandomMatchesScalar) {
  const auto v = random_values(1000000, 12345);
  for (int threads : {1, 3}) {
    OmpThreads omp(threads);
    for (DType t : {DType::bf16, DType::f16}) expect_cast_matches_scalar(t, v);
  }
}

// Every length 0..40 (vector body + scalar tail) at an unaligned start.
TEST(Convert, ArithmeticF32ToHalfMatchesTheHardware) {
  // The fallback of compilers without _Float16: every f32 whose top 20 bits
  // vary (all exponents, signs and the rounding-relevant mantissa bits, with
  // the low bits exercising ties) rounds as F16C does; NaNs stay NaNs.
  for (uint32_t hi = 0; hi < (1u << 20); ++hi)
    for (uint32_t lo : {0x000u, 0x7ffu, 0x800u, 0x801u, 0xfffu}) {
      const uint32_t bits = (hi << 12) | lo;
      float f;
      std::memcpy(&f, &bits, 4);
      const uint16_t want = f32_to_f16(f), got = f32_to_f16_arith(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(f16_to_f32(got))) << std::hex << bits;
      } else {
        ASSERT_EQ(got, want) << std::hex << bits;
      }
    }
}

TEST(Convert, ShortAndUnalignedLengths) {
  const auto v = random_values(64, 7);
  for (size_t n = 0; n <= 40; ++n)
    for (DType t : {DType::bf16, DType::f16}) {
      std::vector<float> src(v.begin() + 1, v.begin() + 1 + long(n));
      expect_cast_matches_scalar(t, src);
      std::vector<uint16_t> h(n + 1);
      for (size_t i = 0; i < n; ++i) h[i + 1] = uint16_t(bits(v[i]) * 2654435761u >> 16);
      std::vector<float> out(n + 1, 42.0f);
      cast_to_f32(out.data(), h.data() + 1, t, n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(out[i]), bits(scalar_to_f32(t, h[i + 1])));
      EXPECT_EQ(out[n], 42.0f) << "wrote past n";
    }
}

TEST(Convert, F32IsACopy) {
  const auto v = random_values(100003, 3);
  std::vector<float> a(v.size()), b(v.size());
  cast_from_f32(a.data(), DType::f32, v.data(), v.size());
  cast_to_f32(b.data(), a.data(), DType::f32, a.size());
  EXPECT_EQ(std::memcmp(b.data(), v.data(), v.size() * 4), 0);
}

TEST(Convert, RoundToDtypeIsScalarRoundTrip) {
  auto v = edge_values();
  const auto r = random_values(1000003, 99);  // not a multiple of 16 or of the chunk
  v.insert(v.end(), r.begin(), r.end());
  for (int threads : {1, 2}) {
    OmpThreads omp(threads);
    for (DType t : {DType::bf16, DType::f16}) {
      std::vector<float> x = v;
      round_to_dtype(x.data(), t, x.size());
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_EQ(bits(x[i]), bits(scalar_to_f32(t, scalar_from_f32(t, v[i]))))
            << dtype_name(t) << " i=" << i << " bits=0x" << std::hex << bits(v[i]);
    }
    std::vector<float> x = v;
    round_to_dtype(x.data(), DType::f32, x.size());
    EXPECT_EQ(std::memcmp(x.data(), v.data(), v.size() * 4), 0);
  }
  // Known answers: 1 + 2^-10 is exact in f16 but not in bf16; 65520 overflows f16.
  float y[3] = {1.0f + std::ldexp(1.0f, -10), 65520.0f, std::ldexp(1.0f, -25)};
  round_to_dtype(y, DType::f16, 3);
  EXPECT_EQ(y[0], 1.0f + std::ldexp(1.0f, -10));
  EXPECT_TRUE(std::isinf(y[1]));
  EXPECT_EQ(bits(y[2]), 0u);
  float z = 1.0f + std::ldexp(1.0f, -10);
  round_to_dtype(&z, DType::bf16, 1);
  EXPECT_EQ(z, 1.0f);
}

TEST(Convert, HasNonfinite) {
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), from_bits(0xff800001u)};
  EXPECT_FALSE(has_nonfinite(nullptr, 0));
  for (int threads : {1, 4}) {
    OmpThreads omp(threads);
    for (size_t n : {size_t(1), size_t(17), size_t(1000000)}) {
      // Finite extremes must not trip it.
      std::vector<float> x(n, 1.0f);
      x[0] = std::numeric_limits<float>::max();
      x[n - 1] = -std::numeric_limits<float>::max();
      x[n / 2] = std::numeric_limits<float>::denorm_min();
      EXPECT_FALSE(has_nonfinite(x.data(), n)) << "n=" << n;
      EXPECT_FALSE(has_nonfinite(x.data(), 0));
      for (size_t pos : {size_t(0), n / 2, n - 1})
        for (float b : bad) {
          std::vector<float> y(n, 0.5f);
          y[pos] = b;
          EXPECT_TRUE(has_nonfinite(y.data(), n)) << "n=" << n << " pos=" << pos << " v=" << b;
          if (pos > 0) {
            EXPECT_FALSE(has_nonfinite(y.data(), pos)) << "n=" << n << " pos=" << pos;
          }
        }
    }
  }
}

}  // namespace
}  // namespace braid::kernels
