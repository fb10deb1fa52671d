#pragma once
// `hypic bench blas`: the sgemm rate of the BLAS kernel in use, per thread count: hypic's
// tiled gemm (what every command runs) and one whole call of the BLAS on its own threads; then
// bf16-weight products per path, and few-row products in linear's column tiles against one
// single-threaded BLAS call.
#include <string>
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
  // bf16 section: nn.Linear products y[m,n] = x[m,k]·W[n,k]ᵀ, each {m, n, k}; empty: none.
  std::vector<std::vector<int>> bf16_shapes = {
      {1, 2048, 2048},  {8, 2048, 2048},   {16, 6144, 2048},  {32, 6144, 2048},
      {64, 2048, 2048}, {512, 6144, 2048}, {1024, 2048, 6144}};
  // Few-row section: nn.Linear products too short to split by rows (a pic query's junction
  // pass, decode steps), each {m, n, k}; empty: none.
  std::vector<std::vector<int>> few_row_shapes = {{1, 4096, 1024},  {8, 768, 256},
                                                  {160, 768, 256},  {160, 256, 512},
                                                  {160, 1024, 256}, {64, 2048, 1024}};
};

// One shape of the few-row section, at the thread count in use: kernels::linear in its column
// tiles (kernels::linear_tiling) against one single-threaded BLAS call, which is how such a
// product ran before those tiles.
struct FewRowRate {
  int m = 0, n = 0, k = 0;
  int tiles = 1;           // linear_tiling's tiles
  double tiled_us = 0;     // kernels::linear, median
  double one_call_us = 0;  // one BLAS call on one thread, median
};

// One shape of the bf16 section, at the thread count in use: GFLOP/s of the f32 product
// (kernels::linear on the widened weights) and of each bf16 path (0 where absent).
struct Bf16Rate {
  int m = 0, n = 0, k = 0;
  double f32_gflops = 0, convert_gflops = 0, dot3_gflops = 0, dot2_gflops = 0, dot1_gflops = 0;
  std::string auto_path;  // what linear_bf16 runs for this shape
  std::string fastest;    // "f32", "convert", "dot3", "dot2" or "dot1"
  // vs the f32 product, relative to max |y| (convert: 0, the same numbers)
  double dot3_max_rel_err = 0, dot2_max_rel_err = 0, dot1_max_rel_err = 0;
};

struct BlasRate {
  int threads = 1;
  double gflops = 0;           // kernels::gemm: tiles, one BLAS thread each
  double one_call_gflops = 0;  // one BLAS call on its own threads (not thread-count independent)
};

struct BlasResult {
  kernels::BlasInfo blas;            // the library and kernel measured
  std::vector<BlasRate> rates;       // 1 … blas.threads (at least one entry)
  std::vector<Bf16Rate> bf16;        // at blas.threads
  std::vector<FewRowRate> few_rows;  // at blas.threads
};

// Measures 1 … the BLAS's thread count in turn, then leaves the BLAS at its thread count.
BlasResult run_blas(const BlasOptions& options);

}  // namespace hypic::bench
