// Deterministic scatter-add of rows, shared by the backward kernels that sum
// per-token gradients into parameter rows (embeddings, positions, biases).
#pragma once
#include <algorithm>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// For i in [0, n): dst(i)[c] += src[i * C + c], c in [0, C), src (n, C)
/// stored in `t` (f32, bf16 or f16, each element widened exactly); rows whose
/// dst(i) is nullptr are skipped. Threads own blocks of `chunk` columns and
/// walk the rows in order, so every sum is formed in row order: the result does
/// not depend on the thread count (bitwise reproducible).
template <typename Dst>
void add_rows_in_order(Dst dst, const void* src, DType t, int64_t n, int64_t C, int64_t chunk = 32) {
  with_f32_loader(src, t, [&](auto load) {
    const int64_t nchunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t c0 = ch * chunk, c1 = std::min(C, c0 + chunk);
      for (int64_t i = 0; i < n; ++i) {
        float* g = dst(i);
        if (!g) continue;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) g[c] += load(i * C + c);
      }
    }
    return 0;
  });
}

/// add_rows_in_order over f32 rows.
template <typename Dst>
void add_rows_in_order(Dst dst, const float* src, int64_t n, int64_t C, int64_t chunk = 32) {
  add_rows_in_order(dst, static_cast<const void*>(src), DType::f32, n, C, chunk);
}

}  // namespace braid::kernels
