#pragma once
// `hypic bench blas`: the sgemm rate of the BLAS kernel in use, per thread count: hypic's
// tiled gemm (what every command runs) and one whole call of the BLAS on its own threads.
#include <vector>

#include "hypic/kernels/blas.hpp"

namespace hypic::bench {

// Single-process sgemm rate (GFLOP/s) of kernels::gemm at the thread count in use: median of
// `reps` square n×n products after one warm-up. With one_call_threads > 0, of one whole call
// of the BLAS on that many of its own threads instead (kernels::gemm_one_blas_call).
double measure_sgemm_gflops(int n, int reps, int one_call_threads = 0);

struct BlasOptions {
  int n = 2048;  // matrix size (n x n x n)
  int reps = 5;  // timed products per thread count (median)
};

struct BlasRate {
  int threads = 1;
  double gflops = 0;           // kernels::gemm: tiles, one BLAS thread each
  double one_call_gflops = 0;  // one BLAS call on its own threads (not thread-count independent)
};

struct BlasResult {
  kernels::BlasInfo blas;       // the library and kernel measured
  std::vector<BlasRate> rates;  // 1 … blas.threads (at least one entry)
};

// Measures 1 … the BLAS's thread count in turn, then leaves the BLAS at its thread count.
BlasResult run_blas(const BlasOptions& options);

}  // namespace hypic::bench
