#include "bench/peak.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/threads.hpp"

namespace hypic::bench {
namespace {

void check_run(kernels::PeakLoop loop, const kernels::PeakLoopRun& run) {
  HYPIC_REQUIRE(run.checksum == run.expected,
                std::string("bench peak: loop ") + kernels::peak_loop_name(loop) + " computed " +
                    std::to_string(run.checksum) + " where exact arithmetic gives " +
                    std::to_string(run.expected) + "; no rate reported for it");
}

// Seconds of `threads` threads each running `iterations` iterations, started together.
double timed_run(kernels::PeakLoop loop, int threads, int64_t iterations) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<kernels::PeakLoopRun> runs(threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      runs[t] = kernels::run_peak_loop(loop, iterations);
    });
  while (ready.load() < threads - 1) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  runs[0] = kernels::run_peak_loop(loop, iterations);
  for (auto& th : pool) th.join();
  const double s = seconds_since(t0);
  for (const auto& r : runs) check_run(loop, r);
  return s;
}

}  // namespace

double measure_peak_loop(kernels::PeakLoop loop, int threads, double seconds, int reps) {
  HYPIC_REQUIRE(threads >= 1 && reps >= 1 && seconds > 0,
                "bench peak: threads, reps and seconds must be positive");
  // Calibrate on one thread: iterations for about `seconds`.
  int64_t iterations = 1 << 14;
  double s = timed_run(loop, 1, iterations);
  while (s < 0.02) {
    iterations *= 4;
    s = timed_run(loop, 1, iterations);
  }
  iterations = std::max<int64_t>(1, static_cast<int64_t>(iterations * seconds / s));
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const double t = timed_run(loop, threads, iterations);
    best = std::max(best, kernels::peak_loop_flops_per_iteration(loop) * double(iterations) *
                              threads / t / 1e9);
  }
  return best;
}

PeakResult run_peak(const PeakOptions& options) {
  PeakResult result;
  result.cpu_model = kernels::cpu_model();
  result.isa = kernels::cpu_isa_summary();
  std::vector<int> counts = options.threads;
  if (counts.empty()) counts = {1, kernels::threads()};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (const kernels::PeakLoop loop : kernels::kPeakLoops) {
    std::string why;
    const bool available = kernels::peak_loop_available(loop, &why);
    for (const int t : counts) {
      PeakRate rate;
      rate.loop = kernels::peak_loop_name(loop);
      rate.available = available;
      rate.why_not = why;
      rate.threads = t;
      if (available) {
        rate.gflops = measure_peak_loop(loop, t, options.seconds, options.reps);
        rate.gflops_per_thread = rate.gflops / t;
      }
      result.rates.push_back(rate);
      if (!available) break;  // one row says why
    }
  }
  return result;
}

F32Peak measure_f32_peak(int threads, double seconds, int reps) {
  F32Peak peak;
  peak.threads = threads;
  for (const kernels::PeakLoop loop : {kernels::PeakLoop::Avx512Fma, kernels::PeakLoop::Avx2Fma}) {
    if (!kernels::peak_loop_available(loop)) continue;
    peak.loop = kernels::peak_loop_name(loop);
    peak.gflops = measure_peak_loop(loop, threads, seconds, reps);
    break;
  }
  return peak;
}

}  // namespace hypic::bench
