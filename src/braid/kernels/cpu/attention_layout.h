// Layout helpers shared by the attention kernels (attention.cpp and
// flash_attention.cpp): the token-major <-> head-major permutation and the
// rounding of f32 rows into the operand dtype.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels::detail {

/// Copies between the token-major layout (B, T, nparts*C), heads inside each
/// part, and the head-major one (nparts, B, NH, T, hs), elements of `esz`
/// bytes: to_heads = true splits src (token-major) into dst (head-major),
/// false merges back. Spread over the OpenMP team.
void permute_heads(void* dst, const void* src, size_t esz, int64_t B, int64_t T, int64_t C, int64_t NH,
                   int64_t nparts, bool to_heads);

/// Throws braid::Error unless NH > 0 divides C and store is f32 or round.
void check_attention_dtypes(int64_t C, int64_t NH, DType store, DType round);

/// dst (n, store) = src (n, f32) rounded to `round` (f32 rows round in place
/// when dst == src). Serial: it runs per row inside parallel loops; bitwise
/// the bulk casts of convert.h.
void store_row(void* dst, const float* src, int64_t n, DType store, DType round);

/// store_row over a whole buffer, spread over the OpenMP team.
void store_all(void* dst, float* src, size_t n, DType store, DType round);

/// Element offsets into a buffer of dtype t.
inline const char* elem_at(const void* p, size_t elems, DType t) {
  return static_cast<const char*>(p) + elems * dtype_size(t);
}
inline char* elem_at(void* p, size_t elems, DType t) { return static_cast<char*>(p) + elems * dtype_size(t); }

}  // namespace braid::kernels::detail
