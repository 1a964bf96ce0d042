// OpenMP thread count that also compiles without OpenMP (the TSan build, where
// libgomp is left out and every parallel loop runs on the calling thread).
#pragma once
#ifdef _OPENMP
#include <omp.h>
#endif

namespace braid {

inline int omp_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/// This thread's number within the current OpenMP team (0 outside one, or without OpenMP).
inline int omp_thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

inline void set_omp_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace braid
