#pragma once
// One thread count for every host kernel and the host GEMM. The BLAS itself runs on one thread;
// hypic splits each product into tiles fixed by its shape and runs the tiles on these threads,
// and every other kernel splits its work over heads, rows or tokens. No reduction is split
// across threads, so results are bit-identical at every thread count (docs/threads.md).
// Implementation: kernels/host/threads.cpp.
#include <cstdint>
#include <string>

namespace hypic::kernels {

// The threads the host kernels use from now on (at least 1). Without OpenMP in the build, the
// kernels run on the calling thread whatever the count.
void set_threads(int n);
// The current count: what set_threads set, else OpenMP's default (OMP_NUM_THREADS or the CPUs
// of this process's affinity mask); 1 when built without OpenMP.
int threads();
// True when the build has OpenMP (HYPIC_OPENMP and a compiler that supports it).
bool threading_compiled();
// How the host kernels run in parallel, in words: "OpenMP 201511" or why not.
std::string threading_description();

// Loops of fewer (approximate) operations than this run on the calling thread (default
// kDefaultMinParallelWork, see kernels/host/parallel.hpp). The thread tests set 0, so that
// every loop of more than one item runs on the team at their small shapes.
constexpr int64_t kDefaultMinParallelWork = int64_t(1) << 19;
void set_min_parallel_work(int64_t ops);
int64_t min_parallel_work();

}  // namespace hypic::kernels
