// Counter-based random numbers: a value is a pure function of (seed, stream,
// index), so any rank can produce exactly the slice of a tensor it owns and every
// layout starts from identical weights (initialise, then slice: docs/ARCHITECTURE.md).
// Mixing function: SplitMix64 finaliser (Steele, Lea, Flood 2014).
#pragma once
#include <cmath>
#include <cstdint>

namespace braid {

inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// 64 random bits for (seed, stream, index).
inline uint64_t rand_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream + 0x632be59bd9b4e019ull)) + index);
}

/// Uniform in [0, 1) with 24 bits of precision.
inline float rand_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(rand_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

/// Standard normal via Box-Muller on two counter draws.
inline float rand_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t b = rand_bits(seed, stream, index);
  double u1 = (static_cast<double>(b >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0,1]
  double u2 = static_cast<double>(mix64(b) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

/// A small sequential generator (xoshiro-style state from SplitMix64) for
/// sampling and data order, seeded deterministically.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace braid
