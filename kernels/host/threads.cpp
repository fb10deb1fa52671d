#include "hypic/kernels/threads.hpp"

#include <algorithm>
#include <atomic>

#include "hypic/kernels/blas.hpp"

#if defined(HYPIC_WITH_OPENMP)
#include <omp.h>
#endif

namespace hypic::kernels {
namespace {

int default_threads() {
#if defined(HYPIC_WITH_OPENMP)
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

// First use pins the BLAS to one thread: its own threading would split some products along
// k (results then depend on the count) and would oversubscribe the kernels' threads.
std::atomic<int>& current() {
  static std::atomic<int> count{[] {
    blas_use_one_thread();
    return default_threads();
  }()};
  return count;
}

std::atomic<int64_t>& min_work() {
  static std::atomic<int64_t> ops{kDefaultMinParallelWork};
  return ops;
}

}  // namespace

void set_min_parallel_work(int64_t ops) {
  min_work().store(ops < 0 ? 0 : ops, std::memory_order_relaxed);
}

int64_t min_parallel_work() {
  return min_work().load(std::memory_order_relaxed);
}

void set_threads(int n) {
  n = std::max(1, n);
  current().store(n);
#if defined(HYPIC_WITH_OPENMP)
  omp_set_num_threads(n);
#endif
}

int threads() {
#if defined(HYPIC_WITH_OPENMP)
  return current().load();
#else
  current();
  return 1;
#endif
}

bool threading_compiled() {
#if defined(HYPIC_WITH_OPENMP)
  return true;
#else
  return false;
#endif
}

std::string threading_description() {
#if defined(HYPIC_WITH_OPENMP)
  return "OpenMP " + std::to_string(_OPENMP);
#else
  return "one thread (built without OpenMP: configure with -DHYPIC_OPENMP=ON and an OpenMP "
         "compiler runtime)";
#endif
}

}  // namespace hypic::kernels
