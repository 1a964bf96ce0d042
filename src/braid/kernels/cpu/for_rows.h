// Row-wise work over a matrix stored in any dtype, spread over the OpenMP team.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels::detail {

/// Runs fn(i, at) for rows i in [0, N) of x (N rows `stride` elements apart,
/// dtype dt) over the OpenMP team, at(v) = element v of row i widened to f32.
/// The loader starts at the row so that vectorised loops over v read
/// contiguous elements (a loader over the whole buffer, indexed i * stride + v,
/// made GCC gather every element: 7-12x slower).
template <typename Fn>
void for_rows(const void* x, DType dt, int64_t N, int64_t stride, Fn&& fn) {
  const char* base = static_cast<const char*>(x);
  const size_t row_bytes = size_t(stride) * dtype_size(dt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    with_f32_loader(base + size_t(i) * row_bytes, dt, [&](auto at) {
      fn(i, at);
      return 0;
    });
}

}  // namespace braid::kernels::detail
