#include "bench/blas.hpp"

#include <algorithm>
#include <random>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/threads.hpp"

namespace hypic::bench {

double measure_sgemm_gflops(int n, int reps, int one_call_threads) {
  HYPIC_REQUIRE(n > 0 && reps > 0,
                "sgemm benchmark: the size and the repetitions must be positive");
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  auto product = [&] {
    if (one_call_threads > 0)
      kernels::gemm_one_blas_call(one_call_threads, false, true, n, n, n, 1.0f, a.data(), n,
                                  b.data(), n, 0.0f, c.data(), n);
    else
      kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  product();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    product();
    times.push_back(seconds_since(t0));
  }
  return 2.0 * n * double(n) * n / median(times) / 1e9;
}

BlasResult run_blas(const BlasOptions& o) {
  HYPIC_REQUIRE(o.n > 0 && o.reps > 0, "--n and --reps must be positive");
  BlasResult r;
  r.blas = kernels::blas_info();
  const int max_threads = std::max(1, r.blas.threads);
  for (int t = 1; t <= max_threads; ++t) {
    kernels::set_threads(t);
    r.rates.push_back({t, measure_sgemm_gflops(o.n, o.reps), measure_sgemm_gflops(o.n, o.reps, t)});
  }
  kernels::set_threads(max_threads);
  return r;
}

}  // namespace hypic::bench
