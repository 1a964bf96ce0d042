// Element-wise reduction kernels used by the collective algorithms. Arithmetic is in
// f32 whatever the storage type (bf16/f16 are widened, combined, rounded once per call
// with round-to-nearest-even), so a ring hop costs one rounding in 16-bit types.
#pragma once
#include <cstddef>

#include "braid/comm/communicator.h"
#include "braid/core/dtype.h"

namespace braid::comm {

/// dst[i] = a[i] op b[i] for i < n, computed in f32. For ReduceOp::avg this is a sum;
/// pass divisor > 0 on the last step to divide the f32 result by it before rounding
/// (avg = sum, then one division by the group size). dst may alias a or b.
void reduce_elems(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op,
                  float divisor = 0.f);

/// dst[i] = src[i] / divisor (f32 arithmetic, one rounding). dst may alias src.
void divide_elems(void* dst, const void* src, size_t n, DType dtype, float divisor);

/// Widen n elements of src (dtype) into f32 dst, and narrow back.
void to_f32(float* dst, const void* src, size_t n, DType dtype);
void from_f32(void* dst, const float* src, size_t n, DType dtype, float divisor = 0.f);

}  // namespace braid::comm
