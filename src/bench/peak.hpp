#pragma once
// `hypic bench peak`: the machine's floating-point peak, measured by the register-resident loops
// of kernels/cpu.hpp on 1 … N threads, one loop per instruction set; and the f32 FMA peak the
// other benchmarks report their rates against.
#include <string>
#include <vector>

#include "hypic/kernels/cpu.hpp"

namespace hypic::bench {

struct PeakOptions {
  double seconds = 0.25;  // per timed run (each rate is the best of `reps` runs)
  int reps = 3;
  std::vector<int> threads;  // thread counts to measure; empty: 1 and kernels::threads()
};

struct PeakRate {
  std::string loop;  // kernels::peak_loop_name
  bool available = false;
  std::string why_not;  // when not available
  int threads = 0;
  double gflops = 0;  // all threads together (0 where not available)
  double gflops_per_thread = 0;
};

struct PeakResult {
  std::string cpu_model, isa;  // kernels::cpu_model(), kernels::cpu_isa_summary()
  std::vector<PeakRate> rates;
};

// Every loop at every thread count. A run whose checksum differs from exact arithmetic throws
// hypic::Error (the loop computed something else: no figure is printed for it).
PeakResult run_peak(const PeakOptions& options);

// The widest f32 FMA loop available (AVX-512 before AVX2) at `threads` threads: the f32 peak
// that bench forward and bench blas report their rates against. loop is empty (and gflops 0)
// where neither runs here.
struct F32Peak {
  std::string loop;
  int threads = 0;
  double gflops = 0;
};
F32Peak measure_f32_peak(int threads, double seconds = 0.2, int reps = 3);

// Best GFLOP/s of one loop on `threads` threads started together: each runs the same number of
// iterations, sized from a calibration run to last about `seconds`.
double measure_peak_loop(kernels::PeakLoop loop, int threads, double seconds, int reps);

}  // namespace hypic::bench
