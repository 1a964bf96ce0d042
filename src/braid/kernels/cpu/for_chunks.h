// Element-wise work over [0, n) split into fixed pieces for the OpenMP team:
// the kernels whose elements are independent (casts, fills) share it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "braid/core/threads.h"

namespace braid::kernels::detail {

// Elements per OpenMP work item: 128 KiB of f32, big enough that the fork/join
// cost is noise, small enough that 1e6 elements still spread over the threads.
constexpr size_t kChunk = size_t(1) << 15;

// Why no parallel region for one chunk or one thread: measured on this (AMD
// EPYC, VM) host, the same AVX-512 loop ran 2x slower inside a one-thread
// `omp parallel` than outside it, and the region buys nothing there anyway.
inline bool run_serial(int64_t nchunks) { return nchunks <= 1 || omp_threads() == 1; }

// Runs f(begin, end) over [0, n) in kChunk pieces, in parallel when there is
// more than one piece. Every element is handled independently, so the result
// does not depend on the thread count.
template <class F>
void for_chunks(size_t n, F&& f) {
  const int64_t nchunks = int64_t((n + kChunk - 1) / kChunk);
  if (run_serial(nchunks)) {
    if (n > 0) f(size_t(0), n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const size_t b = size_t(c) * kChunk;
    f(b, std::min(n, b + kChunk));
  }
}

}  // namespace braid::kernels::detail
