#include "bench/blas.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

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

namespace {

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Timed repetitions for ~50 ms of `flop`-sized products: at least `reps`, at most 200.
int runs_for(double flop, int reps) {
  return std::max(reps, int(std::min(200.0, 5e8 / flop)));
}

// A section's {m, n, k} into the rate's fields, checked.
template <typename Rate>
Rate with_shape(const std::vector<int>& shape, const char* section) {
  HYPIC_REQUIRE(shape.size() == 3 && shape[0] > 0 && shape[1] > 0 && shape[2] > 0,
                std::string(section) + " shapes are three positive sizes m, n, k");
  Rate r;
  r.m = shape[0];
  r.n = shape[1];
  r.k = shape[2];
  return r;
}

Bf16Rate measure_bf16(const std::vector<int>& shape, int reps) {
  Bf16Rate r = with_shape<Bf16Rate>(shape, "bf16");
  const size_t m = size_t(r.m), n = size_t(r.n), k = size_t(r.k);
  std::vector<float> x(m * k), wf(n * k), y(m * n), ref(m * n);
  std::vector<uint16_t> wb(n * k);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  for (size_t i = 0; i < wb.size(); ++i) {
    wb[i] = to_bf16(u(rng));
    const uint32_t bits = uint32_t(wb[i]) << 16;
    std::memcpy(&wf[i], &bits, 4);  // the same weights, widened
  }
  const double flop = 2.0 * double(m) * double(n) * double(k);
  auto rate = [&](const std::function<void()>& product) {
    return flop / median_seconds(runs_for(flop, reps), product) / 1e9;
  };
  r.f32_gflops = rate([&] { kernels::linear(x.data(), wf.data(), ref.data(), r.m, r.n, r.k); });
  double scale = 0;
  for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
  auto err = [&] {
    double e = 0;
    for (size_t i = 0; i < y.size(); ++i) e = std::max(e, double(std::fabs(y[i] - ref[i])));
    return scale > 0 ? e / scale : e;
  };
  auto path = [&](kernels::Bf16Gemm p) {
    return rate(
        [&] { kernels::linear_bf16_with(p, x.data(), wb.data(), y.data(), r.m, r.n, r.k); });
  };
  r.convert_gflops = path(kernels::Bf16Gemm::Convert);
  if (kernels::bf16_dot_available()) {
    r.dot3_gflops = path(kernels::Bf16Gemm::Dot3);
    r.dot3_max_rel_err = err();
    r.dot2_gflops = path(kernels::Bf16Gemm::Dot2);
    r.dot2_max_rel_err = err();
    r.dot1_gflops = path(kernels::Bf16Gemm::Dot1);
    r.dot1_max_rel_err = err();
  }
  r.auto_path = kernels::bf16_gemm_name(kernels::bf16_gemm_path(r.m, r.n, r.k));
  const std::pair<const char*, double> all[] = {{"f32", r.f32_gflops},
                                                {"convert", r.convert_gflops},
                                                {"dot3", r.dot3_gflops},
                                                {"dot2", r.dot2_gflops},
                                                {"dot1", r.dot1_gflops}};
  double best = 0;
  for (const auto& [name, g] : all)
    if (g > best) {
      best = g;
      r.fastest = name;
    }
  return r;
}

FewRowRate measure_few_rows(const std::vector<int>& shape, int reps) {
  FewRowRate r = with_shape<FewRowRate>(shape, "few-row");
  r.tiles = static_cast<int>(kernels::linear_tiling(r.m, r.n, r.k).tiles());
  std::vector<float> x(size_t(r.m) * r.k), w(size_t(r.n) * r.k), y(size_t(r.m) * r.n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  for (auto& v : w) v = u(rng);
  const double flop = 2.0 * r.m * double(r.n) * r.k;
  const int runs = runs_for(flop, reps);
  r.tiled_us = 1e6 * median_seconds(runs, [&] {
                 kernels::linear(x.data(), w.data(), y.data(), r.m, r.n, r.k);
               });
  r.one_call_us = 1e6 * median_seconds(runs, [&] {
                    kernels::gemm_one_blas_call(1, false, true, r.m, r.n, r.k, 1.0f, x.data(), r.k,
                                                w.data(), r.k, 0.0f, y.data(), r.n);
                  });
  return r;
}

}  // namespace

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
  for (const std::vector<int>& shape : o.bf16_shapes) r.bf16.push_back(measure_bf16(shape, o.reps));
  for (const std::vector<int>& shape : o.few_row_shapes)
    r.few_rows.push_back(measure_few_rows(shape, o.reps));
  return r;
}

}  // namespace hypic::bench
