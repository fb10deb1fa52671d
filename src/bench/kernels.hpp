#pragma once
// `hypic bench kernels`: every backend op of a real prefill at the given thread counts: its
// time, speed-up and share of the prefill, and a node-scale projection (Amdahl's law with the
// parallel fraction each op showed).
#include <cstdint>
#include <string>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "model/config.hpp"

namespace hypic::bench {

struct KernelsOptions {
  std::string arch = "qwen3_5";
  std::string preset = "bench";
  int tokens = 1024;                  // prompt length of each prefill
  int reps = 3;                       // timed prefills per thread count (medians), after a warm-up
  std::vector<int> threads = {1, 2};  // thread counts, ascending; 1 needed for the projection
  std::vector<int> project_to = {16, 32, 64};
  uint64_t seed = 1;
};

struct KernelRow {
  std::string op;                // kernels::op_name
  int64_t calls = 0;             // per prefill
  std::vector<double> seconds;   // per prefill, median over reps, one per thread count
  double share = 0;              // of the prefill at the first thread count
  double parallel_fraction = 0;  // Amdahl's f from the first to the last count, in [0, 1]
};

struct Projection {
  int cores = 0;
  double prefill_seconds = 0;
  double speedup = 0;  // over the first thread count
};

struct KernelsResult {
  model::ModelConfig config;
  kernels::BlasInfo blas;
  std::string threading;                // kernels::threading_description()
  std::vector<int> threads;             // as measured
  std::vector<double> prefill_seconds;  // median per thread count
  // Process CPU seconds over wall seconds of those prefills: the cores the run actually got
  // (below the thread count when other processes share the cores).
  std::vector<double> cores_used;
  std::vector<KernelRow> rows;         // ops with calls, by share (largest first)
  KernelRow other;                     // prefill time outside any op (glue, allocation)
  std::vector<Projection> projection;  // empty unless threads starts at 1 and has two counts
  std::string projection_assumption;
};

// Builds the preset's model with random weights and prefills a random prompt at each thread
// count through a backend that times every op; leaves the thread count as it found it.
KernelsResult run_kernels(const KernelsOptions& options);

// Amdahl: the fraction f of t1 that scales, from t(p) = t1 · ((1 − f) + f / p), clamped to [0, 1].
double amdahl_parallel_fraction(double t1, double tp, int p);

}  // namespace hypic::bench
