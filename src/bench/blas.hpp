#pragma once
// `hypic bench blas`: the sgemm rate of the BLAS kernel in use, per thread count.
#include <vector>

#include "hypic/kernels/blas.hpp"

namespace hypic::bench {

// Single-process sgemm rate (GFLOP/s) with the BLAS and thread count in use: median of
// `reps` square n×n products after one warm-up.
double measure_sgemm_gflops(int n, int reps);

struct BlasOptions {
  int n = 2048;  // matrix size (n x n x n)
  int reps = 5;  // timed products per thread count (median)
};

struct BlasRate {
  int threads = 1;
  double gflops = 0;
};

struct BlasResult {
  kernels::BlasInfo blas;       // the library and kernel measured
  std::vector<BlasRate> rates;  // 1 … blas.threads (at least one entry)
};

// Measures 1 … the BLAS's thread count in turn, then leaves the BLAS at its thread count.
BlasResult run_blas(const BlasOptions& options);

}  // namespace hypic::bench
