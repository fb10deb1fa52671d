#pragma once
// parallel_for over [0, n) for the host kernels, on kernels::threads() threads (OpenMP, static
// schedule). Each index runs exactly the code it runs at one thread, so a kernel whose items
// write disjoint outputs gives bit-identical results at every thread count. Inside another
// parallel region (a head's products, a tile's work) it runs serially.
#include <cstdint>

#include "hypic/kernels/threads.hpp"

#if defined(HYPIC_WITH_OPENMP)
#include <omp.h>
#endif

namespace hypic::kernels::host {

// Loops below kernels::min_parallel_work() (approximate) operations in all run on the calling
// thread. Waking the team costs 3 µs when its threads spin and 5-40 µs when they sleep
// (hypic's default, docs/threads.md; the most in this VM); half a million operations
// (kDefaultMinParallelWork) take about that long on one core. A pic query's per-window steps
// (the conv and the delta rule over 8 tokens) are below it: with 1 << 14, 410 parallel loops
// per query on the small preset, now 151 (counted once, docs/threads.md).

inline bool in_parallel_region() {
#if defined(HYPIC_WITH_OPENMP)
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

// f(i) for i in [0, n); work_per_item: rough operations per item, to keep tiny loops serial.
template <class F>
void parallel_for(int64_t n, int64_t work_per_item, const F& f) {
#if defined(HYPIC_WITH_OPENMP)
  const int nt = threads();
  if (n > 1 && nt > 1 && n * work_per_item >= min_parallel_work() && !in_parallel_region()) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#else
  (void)work_per_item;
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

// The thread slot of the caller inside parallel_for: 0 … threads() − 1 (0 outside).
inline int thread_slot() {
#if defined(HYPIC_WITH_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace hypic::kernels::host
