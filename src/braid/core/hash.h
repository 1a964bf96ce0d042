// Hashes of raw bytes. FNV-1a (Fowler, Noll, Vo), 64-bit: fast, to compare
// replicas bit for bit and to name records. CRC-32 (ISO 3309, zlib's): the
// checksums of files braid writes (checkpoints, token files). Not for security.
#pragma once
#include <zlib.h>

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

/// Continues CRC-32 `crc` over `bytes` bytes at `data` (zlib's crc32_z, which
/// Python's zlib.crc32 matches).
inline uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

}  // namespace braid
