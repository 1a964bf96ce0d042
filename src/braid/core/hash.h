// FNV-1a (Fowler, Noll, Vo), 64-bit: a fast hash of raw bytes, used to compare
// replicas bit for bit and to name records; not for security.
#pragma once
#include <cstddef>
#include <cstdint>

namespace braid {

constexpr uint64_t kFnvBasis = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

/// Continues hash h over `bytes` bytes at `data`.
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace braid
