// Bulk dtype conversions and finiteness checks for mixed precision: casting
// master weights / gradients between f32 and bf16/f16 buffers, emulating
// half-precision storage in f32 buffers, and detecting overflow for loss scaling.
//
// Every function is bitwise identical to the scalar conversions in
// braid/core/dtype.h (f32_to_bf16, f32_to_f16, bf16_to_f32, f16_to_f32) for
// every input, whatever the thread count: round-to-nearest-even, NaN stays NaN
// (quiet), f16 overflow gives +-inf, denormals are rounded, not flushed.
// Large arrays are split into fixed chunks run by OpenMP; within a chunk, bf16
// and has_nonfinite are loops the compiler vectorises and f16 uses AVX-512
// intrinsics when the build targets them (-march=native), a scalar loop otherwise.
#pragma once
#include <cstddef>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// dst (n, dst_type) = src (n, f32) converted with round-to-nearest-even.
/// dst_type f32 copies. dst and src must not overlap (a bf16/f16 dst is half
/// the size, so an in-place cast is not supported).
void cast_from_f32(void* dst, DType dst_type, const float* src, size_t n);

/// dst (n, f32) = src (n, src_type) widened exactly. src_type f32 copies.
/// dst and src must not overlap.
void cast_to_f32(float* dst, const void* src, DType src_type, size_t n);

/// dst (rows, cols, f32, contiguous) = the rows x cols block of src
/// (src_type) whose rows start `ld` elements apart, widened exactly. ld >=
/// cols; the rows are spread over the OpenMP team. dst and src must not
/// overlap. Throws braid::Error when ld < cols.
void cast_rows_to_f32(float* dst, const void* src, DType src_type, size_t rows, size_t cols, size_t ld);

/// dst (n, dt) = src (n, st): a copy when the dtypes match, else a cast
/// (round to nearest even into a half format).
void copy_cast(void* dst, DType dt, const void* src, DType st, size_t n);

/// dst (n, dt) += src (n, st), the sum in f32 and rounded into dt.
void accumulate_cast(void* dst, DType dt, const void* src, DType st, size_t n);

/// In place: x[i] = f32(half(x[i])) for t = bf16 / f16, i.e. the value the
/// element would have after a round trip through storage of type t (used to
/// emulate half-precision matmul inputs while computing in f32). t = f32 leaves
/// x unchanged. x (n, f32).
void round_to_dtype(float* x, DType t, size_t n);

/// True when any of x (n, f32) is +-inf or NaN. n = 0 gives false.
bool has_nonfinite(const float* x, size_t n);

}  // namespace braid::kernels
