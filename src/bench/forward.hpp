#pragma once
// `hypic bench forward`: prefill throughput of a model against this machine's sgemm rate.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"
#include "model/config.hpp"
#include "model/flops.hpp"

namespace hypic::bench {

struct ForwardOptions {
  int tokens = 4096;   // prompt length
  int reps = 3;        // timed prefills (median reported), after one warm-up
  int seed = 0;        // seed of the random prompt
  int sgemm_n = 2048;  // the sgemm reference: n x n x n products, median of sgemm_reps
  int sgemm_reps = 5;
  // Where the prefill runs (null: the host). On a device backend the reference rates are the
  // device's: cuBLAS sgemm and bf16 GEMM (f32 accumulation) of the same size.
  const kernels::Backend* backend = nullptr;
  std::vector<int> threads;  // thread counts to measure, in order; empty: the current count
  // Instead of a model folder: a config.json file and random weights (fast uniform values:
  // a timing needs the shape, not a distribution), cut to its first `layers` layers when
  // layers > 0, so a large model's shape fits a small machine (the result says the scale).
  std::string config_file;
  int layers = 0;
};

// One thread count's prefill: median time and the parts of its first timed run.
struct ForwardAtThreads {
  int threads = 1;
  double prefill_seconds_median = 0;
  std::vector<std::pair<std::string, double>> seconds_by_part;
  double parts_total = 0;
};

struct ForwardResult {
  model::ModelConfig config;  // of the model loaded
  int config_layers = 0;      // the config file's layers before the cut (0: a model folder)
  double parameter_count = 0;
  kernels::BlasInfo blas;
  double sgemm_gflops = 0;              // host BLAS, or cuBLAS sgemm on a device backend
  double bf16_gemm_gflops = 0;          // cuBLAS bf16 GEMM on a device backend (0 on the host)
  std::string device = "cpu";           // "cpu" or "cuda"
  std::vector<double> prefill_seconds;  // one per timed run
  double prefill_seconds_median = 0;
  double tokens_per_second = 0;
  bool logits_finite = true;  // the last timed run's logits: no NaN or infinity
  model::FlopCount flops;     // counted for one prefill
  double achieved_gflops = 0;
  double fraction_of_sgemm = 0;
  // The host's f32 FMA peak at the last thread count, measured in the same run (bench peak's
  // loop; the host only): achieved_gflops as a fraction of it, and the CPU it ran on.
  std::string cpu_model, isa, f32_peak_loop;
  double f32_peak_gflops = 0;
  double fraction_of_peak = 0;
  double weights_bytes = 0;
  std::string weights_dtype;     // the projections in memory: "f32" or "bf16"
  std::string load_summary;      // model::load_summary: dtypes, bytes, peak memory after loading
  double peak_memory_bytes = 0;  // right after loading (VmHWM)
  double cache_bytes = 0;        // the inference cache after one prefill
  // Seconds per part of the forward pass in the first timed run, in report order (gdn_proj,
  // …, lm_head); parts_total is that run's timed total (q/k/v preparation included, which
  // has no row of its own).
  std::vector<std::pair<std::string, double>> seconds_by_part;
  double parts_total = 0;
  // Every thread count measured (the fields above are the last one's).
  std::vector<ForwardAtThreads> by_threads;
};

// Measures the sgemm rate, then loads the model folder and prefills a random prompt of
// `options.tokens` ids reps + 1 times (the first warms up), at each of options.threads. In that
// order, so that the sgemm buffers are gone before the weights arrive and the process's peak memory
// is the prefill's.
// With options.config_file, model_dir is unused.
ForwardResult run_forward(const std::string& model_dir, const ForwardOptions& options);

}  // namespace hypic::bench
