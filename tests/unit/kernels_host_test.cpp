// Host kernels of the forward pass (activation, rope, attention, moe) against naive loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "hypic/kernels/activation.hpp"
#include "hypic/kernels/attention.hpp"
#include "hypic/kernels/attention_plan.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/moe.hpp"
#include "hypic/kernels/rope.hpp"

namespace {
namespace kernels_host_test {
namespace hk = hypic::kernels;

std::vector<float> randn(size_t n, unsigned seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST(ActivationKernels, SwigluMatchesNaive) {
  const int rows = 5, width = 7;
  const auto gu = randn(static_cast<size_t>(rows) * 2 * width, 1, 3.0f);
  std::vector<float> y(static_cast<size_t>(rows) * width);
  hk::swiglu(gu.data(), y.data(), rows, width);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) {
      const double g = gu[r * 2 * width + i], u = gu[r * 2 * width + width + i];
      EXPECT_NEAR(y[r * width + i], g * sigmoid(g) * u, 1e-5);
    }
}

TEST(ActivationKernels, SigmoidGateAndScaledAdd) {
  const int rows = 4, cols = 6, ld = 15;
  const auto x0 = randn(rows * cols, 2), gate = randn(rows * ld, 3, 2.0f);
  auto x = x0;
  hk::sigmoid_gate(x.data(), gate.data() + 5, rows, cols, ld);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      EXPECT_NEAR(x[r * cols + c], x0[r * cols + c] * sigmoid(gate[r * ld + 5 + c]), 1e-6);

  const auto y = randn(rows * cols, 4), logit = randn(rows, 5);
  auto acc = x0;
  hk::add_sigmoid_scaled(acc.data(), y.data(), logit.data(), rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      EXPECT_NEAR(acc[r * cols + c], x0[r * cols + c] + sigmoid(logit[r]) * y[r * cols + c], 1e-6);
}

TEST(ActivationKernels, GdnGatesMatchFormula) {
  const int rows = 6, heads = 3, ld = 2 * heads;
  auto ba = randn(rows * ld, 6, 4.0f);
  ba[1 * ld + heads] = 30.0f;  // softplus's linear branch
  const auto A_log = randn(heads, 7), dt_bias = randn(heads, 8);
  std::vector<float> beta(rows * heads), g(rows * heads);
  hk::gdn_gates(ba.data(), ba.data() + heads, ld, A_log.data(), dt_bias.data(), beta.data(),
                g.data(), rows, heads);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      const double b = ba[r * ld + h], a = ba[r * ld + heads + h] + double(dt_bias[h]);
      const double sp = a > 20 ? a : std::log1p(std::exp(a));
      EXPECT_NEAR(beta[r * heads + h], sigmoid(b), 1e-6);
      EXPECT_NEAR(g[r * heads + h], -std::exp(double(A_log[h])) * sp,
                  1e-5 * std::max(1.0, std::fabs(sp)));
      EXPECT_LE(g[r * heads + h], 0.0f);
    }
}

// Naive partial neox RoPE in double.
std::vector<float> naive_rope(const std::vector<float>& x, int T, int H, int hd, int rot,
                              double theta, double pos0) {
  std::vector<float> y = x;
  const int half = rot / 2;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < half; ++i) {
        const double ang = (pos0 + t) * std::pow(theta, -2.0 * i / rot);
        const size_t base = (static_cast<size_t>(t) * H + h) * hd;
        const double x1 = x[base + i], x2 = x[base + i + half];
        y[base + i] = static_cast<float>(x1 * std::cos(ang) - x2 * std::sin(ang));
        y[base + i + half] = static_cast<float>(x2 * std::cos(ang) + x1 * std::sin(ang));
      }
  return y;
}

TEST(RopeKernels, ApplyMatchesNaivePartialRotation) {
  const int T = 9, H = 3, hd = 16, rot = 8;
  const auto x0 = randn(static_cast<size_t>(T) * H * hd, 11);
  auto x = x0;
  hk::rope_apply({T, H, hd, rot, 10000.0f}, x.data(), 5);
  const auto expect = naive_rope(x0, T, H, hd, rot, 10000.0, 5);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], expect[i], 2e-5) << i;
  for (int t = 0; t < T; ++t)  // dims past rotary_dim pass through
    for (int h = 0; h < H; ++h)
      for (int c = rot; c < hd; ++c) {
        const size_t i = (static_cast<size_t>(t) * H + h) * hd + c;
        EXPECT_EQ(x[i], x0[i]);
      }
}

TEST(RopeKernels, ShiftsCompose) {
  const int T = 7, H = 2, hd = 32, rot = 16;
  const hk::RopeDims d{T, H, hd, rot, 10000.0f};
  const auto x0 = randn(static_cast<size_t>(T) * H * hd, 12);
  for (const auto& [p1, p2] : {std::pair<int64_t, int64_t>{3, 11}, {1000, 2345}, {-50, 50}}) {
    auto a = x0, b = x0;
    hk::rope_shift(d, a.data(), p1);
    hk::rope_shift(d, a.data(), p2);
    hk::rope_shift(d, b.data(), p1 + p2);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << p1 << "+" << p2;
  }
  // Applying at position p then shifting by δ equals applying at p + δ.
  auto a = x0, b = x0;
  hk::rope_apply(d, a.data(), 20);
  hk::rope_shift(d, a.data(), 300);
  hk::rope_apply(d, b.data(), 320);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4);
}

TEST(AttentionKernels, ExpPolynomialIsAccurate) {
  for (float x = -90.0f; x <= 0.0f; x += 0.01234f) {
    const double e = std::exp(static_cast<double>(x));
    if (x < -87.0f) {
      EXPECT_LT(hk::attention_exp(x), 1e-37);
    } else {
      EXPECT_NEAR(hk::attention_exp(x), e, 3e-7 * e) << x;
    }
  }
  EXPECT_EQ(hk::attention_exp(0.0f), 1.0f);
  // A NaN score (a NaN weight upstream) stays NaN, so the logits show it, and is never converted
  // to an integer on the way (UBSan found that shift; the suite runs under UBSan in CI).
  EXPECT_TRUE(std::isnan(hk::attention_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(hk::attention_exp(-std::numeric_limits<float>::infinity()), hk::attention_exp(-87.0f));
}

// The sigmoid behind the host's gates and SiLUs is built on the same polynomial exp (no libm
// call, so its loops vectorise): within a few ulp of the double-precision value across the
// whole range, no overflow for large |x|, a NaN stays NaN.
TEST(ActivationKernels, SigmoidGateIsAccurateAcrossTheRange) {
  std::vector<float> gate;
  for (float g = -100.0f; g <= 100.0f; g += 0.0517f) gate.push_back(g);
  gate.push_back(std::numeric_limits<float>::quiet_NaN());
  gate.push_back(std::numeric_limits<float>::infinity());
  gate.push_back(-std::numeric_limits<float>::infinity());
  const int n = static_cast<int>(gate.size());
  std::vector<float> x(gate.size(), 1.0f);
  hk::sigmoid_gate(x.data(), gate.data(), 1, n, n);
  for (int i = 0; i < n - 3; ++i) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[i])));
    if (gate[i] < -87.0f) {
      EXPECT_LT(x[i], 2e-38f) << gate[i];  // exp's floor: about 1.6e-38 instead of less
      EXPECT_GE(x[i], 0.0f) << gate[i];
    } else {
      EXPECT_NEAR(x[i], want, 4e-7 * want) << gate[i];
    }
  }
  EXPECT_TRUE(std::isnan(x[n - 3]));
  EXPECT_EQ(x[n - 2], 1.0f);
  EXPECT_LT(x[n - 1], 2e-38f);
}

// Naive causal GQA attention in double.
std::vector<float> naive_attention(const hk::AttentionDims& d, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v) {
  std::vector<float> out(static_cast<size_t>(d.T) * d.H * d.hd);
  const int past = d.n_kv - d.T, group = d.H / d.Hkv;
  for (int t = 0; t < d.T; ++t)
    for (int h = 0; h < d.H; ++h) {
      const int g = h / group, visible = past + t + 1;
      std::vector<double> s(visible);
      double mx = -1e300;
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int c = 0; c < d.hd; ++c)
          dot += double(q[(static_cast<size_t>(t) * d.H + h) * d.hd + c]) *
                 k[(static_cast<size_t>(j) * d.Hkv + g) * d.hd + c];
        s[j] = dot * d.scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int c = 0; c < d.hd; ++c) {
        double o = 0;
        for (int j = 0; j < visible; ++j)
          o += s[j] / sum * v[(static_cast<size_t>(j) * d.Hkv + g) * d.hd + c];
        out[(static_cast<size_t>(t) * d.H + h) * d.hd + c] = static_cast<float>(o);
      }
    }
  return out;
}

TEST(AttentionKernels, CausalGqaMatchesNaive) {
  // T past one query block (128) with and without cached keys before the block, and keys over
  // several steps of the key loop (256).
  for (const auto& [T, n_kv] :
       {std::pair<int, int>{1, 1}, {5, 5}, {3, 40}, {150, 150}, {130, 200}, {300, 700}}) {
    const hk::AttentionDims d{T, n_kv, 6, 2, 8, 0.5f};
    const auto q = randn(static_cast<size_t>(T) * d.H * d.hd, 21, 2.0f);
    const auto k = randn(static_cast<size_t>(n_kv) * d.Hkv * d.hd, 22);
    const auto v = randn(static_cast<size_t>(n_kv) * d.Hkv * d.hd, 23);
    std::vector<float> out(q.size()), work(hk::attention_workspace_floats(d));
    hk::attention_causal(d, q.data(), k.data(), v.data(), out.data(), work.data());
    const auto expect = naive_attention(d, q, k, v);
    float worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expect[i]));
    EXPECT_LT(worst, 2e-5f) << "T=" << T << " n_kv=" << n_kv;
  }
}

// The last layer of a block runs its queries from first_query on (issue 48): whole blocks of
// queries before it are skipped (their rows untouched), and every query computed is the whole
// call's bits, with and without explicit positions.
TEST(AttentionKernels, FirstQuerySkipsWholeBlocksKeepingTheBits) {
  const int T = 300, n_kv = 700;
  hk::AttentionDims d{T, n_kv, 6, 2, 8, 0.5f};
  const auto q = randn(static_cast<size_t>(T) * d.H * d.hd, 31, 2.0f);
  const auto k = randn(static_cast<size_t>(n_kv) * d.Hkv * d.hd, 32);
  const auto v = randn(static_cast<size_t>(n_kv) * d.Hkv * d.hd, 33);
  std::vector<int> positions(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = 2 * t + (t > 150 ? 90 : 0);
  const int bq = hk::attention_plan::query_block(d, 256);
  ASSERT_LT(bq, T) << "the test needs several blocks of queries";
  const size_t row = static_cast<size_t>(d.H) * d.hd;
  const int* const choices[] = {nullptr, positions.data()};
  for (const int* pos : choices) {
    d.positions = pos;
    d.first_query = 0;
    std::vector<float> whole(q.size()), work(hk::attention_workspace_floats(d));
    hk::attention_causal(d, q.data(), k.data(), v.data(), whole.data(), work.data());
    for (int first : {1, bq, bq + 7, T - 1}) {
      d.first_query = first;
      std::vector<float> out(q.size(), 777.0f);
      hk::attention_causal(d, q.data(), k.data(), v.data(), out.data(), work.data());
      EXPECT_EQ(std::memcmp(out.data() + first * row, whole.data() + first * row,
                            (T - first) * row * sizeof(float)),
                0)
          << "first=" << first << (pos ? " with positions" : "");
      const size_t skipped = static_cast<size_t>(first / bq * bq) * row;
      EXPECT_TRUE(std::all_of(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(skipped),
                              [](float x) { return x == 777.0f; }))
          << "first=" << first << ": the blocks before it run";
    }
  }
}

// linear_from keeps the whole product's tiles (issue 48): its rows from `first` on are the
// whole product's bits (a BLAS may round a row differently in a call of fewer rows: OpenBLAS's
// Zen kernel does), and the row tiles wholly before `first` do not run. f32 and bf16 weights.
TEST(BlasKernels, LinearFromKeepsTheWholeProductsBits) {
  const int m = 1100, n = 1024, k = 512;
  const hk::GemmTiling t = hk::linear_tiling(m, n, k);
  ASSERT_GT(t.tm, 1) << "the test needs several row tiles";
  const auto x = randn(static_cast<size_t>(m) * k, 41);
  const auto w = randn(static_cast<size_t>(n) * k, 42);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &w[i], 4);
    wb[i] = static_cast<uint16_t>(bits >> 16);
  }
  for (const bool bf16 : {false, true}) {
    std::vector<float> whole(static_cast<size_t>(m) * n);
    if (bf16)
      hk::linear_bf16(x.data(), wb.data(), whole.data(), m, n, k);
    else
      hk::linear(x.data(), w.data(), whole.data(), m, n, k);
    for (int first : {17, t.mb + 5, m - 1}) {
      std::vector<float> y(whole.size(), 777.0f);
      if (bf16)
        hk::linear_bf16_from(hk::Bf16Gemm::Auto, first, x.data(), wb.data(), y.data(), m, n, k,
                             false);
      else
        hk::linear_from(first, x.data(), w.data(), y.data(), m, n, k, false);
      const size_t f0 = static_cast<size_t>(first) * n;
      EXPECT_EQ(std::memcmp(y.data() + f0, whole.data() + f0, (whole.size() - f0) * sizeof(float)),
                0)
          << "first=" << first << (bf16 ? " bf16" : " f32");
      const size_t skipped = static_cast<size_t>(first / t.mb * t.mb) * n;
      EXPECT_TRUE(std::all_of(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(skipped),
                              [](float e) { return e == 777.0f; }))
          << "first=" << first << ": the tiles before it run";
    }
  }
}

TEST(MoeKernels, RouteMatchesNaiveTopK) {
  const int T = 20, E = 7, k = 3;
  const auto logits = randn(static_cast<size_t>(T) * E, 31, 2.0f);
  for (bool norm : {true, false}) {
    std::vector<int> experts(T * k);
    std::vector<float> weights(T * k);
    hk::moe_route(logits.data(), T, E, k, norm, experts.data(), weights.data());
    for (int t = 0; t < T; ++t) {
      std::vector<double> p(E);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(double(logits[t * E + e])));
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      double top = 0;
      for (int j = 0; j < k; ++j) top += p[order[j]] / sum;
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(experts[t * k + j], order[j]);
        const double w = p[order[j]] / sum / (norm ? top : 1.0);
        EXPECT_NEAR(weights[t * k + j], w, 1e-6);
      }
    }
  }
}

}  // namespace kernels_host_test
}  // namespace

namespace {
namespace kernels_host_test {
// Speed of the attention kernel next to plain sgemm. Disabled: it measures time, and speed
// targets live in benchmarks, not in the suite; run with --gtest_also_run_disabled_tests
// --gtest_filter='*Bench*'.
TEST(AttentionBench, DISABLED_CausalPrefill) {
  const int T =
      std::getenv("HYPIC_BENCH_TOKENS") ? std::atoi(std::getenv("HYPIC_BENCH_TOKENS")) : 4096;
  const hk::AttentionDims d{T, T, 8, 2, 128, 0.088f};
  const auto q = randn(static_cast<size_t>(T) * d.H * d.hd, 1);
  const auto k = randn(static_cast<size_t>(T) * d.Hkv * d.hd, 2);
  const auto v = randn(static_cast<size_t>(T) * d.Hkv * d.hd, 3);
  std::vector<float> out(q.size()), work(hk::attention_workspace_floats(d));
  for (int rep = 0; rep < 2; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    hk::attention_causal(d, q.data(), k.data(), v.data(), out.data(), work.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flops = 4.0 * d.H * d.hd * (static_cast<double>(T) * T / 2);
    t0 = std::chrono::steady_clock::now();
    std::vector<float> c(static_cast<size_t>(2048) * 2048);
    hk::gemm(false, true, 2048, 2048, 1024, 1.0f, q.data(), 1024, k.data(), 1024, 0.0f, c.data(),
             2048);
    const double sg = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("attention T=%d: %.3f s, %.1f GFLOP/s (sgemm now %.1f GFLOP/s)\n", T, s,
                flops / s / 1e9, 2.0 * 2048 * 2048 * 1024 / sg / 1e9);
  }
}

// pic's junction pass at 16 segments x 512 tokens on the small preset (4 heads on 2 kv heads of
// 64): 16 windows of 8 queries, 514 tokens apart, and 32 question tokens at the end, against
// 8224 keys. Best of 30. Disabled like the one above (it measures time); run it the same way
// (README, benchmark table).
TEST(AttentionBench, DISABLED_JunctionWindows) {
  std::vector<int> positions;
  for (int i = 0; i < 16; ++i)
    for (int t = 0; t < 8; ++t) positions.push_back(i * 514 + t);
  for (int t = 0; t < 32; ++t) positions.push_back(16 * 514 + t);
  hk::AttentionDims d{static_cast<int>(positions.size()), positions.back() + 1, 4, 2, 64, 0.125f};
  d.positions = positions.data();
  const auto q = randn(static_cast<size_t>(d.T) * d.H * d.hd, 1);
  const auto k = randn(static_cast<size_t>(d.n_kv) * d.Hkv * d.hd, 2);
  const auto v = randn(static_cast<size_t>(d.n_kv) * d.Hkv * d.hd, 3);
  std::vector<float> out(q.size()), work(hk::attention_workspace_floats(d));
  double best = 1e9;
  for (int rep = 0; rep < 30; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    hk::attention_causal(d, q.data(), k.data(), v.data(), out.data(), work.data());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double flops = 0;
  for (int p : positions) flops += 4.0 * d.H * d.hd * (p + 1);
  std::printf("junction windows (%d queries, %d keys): %.2f ms, %.1f GFLOP/s\n", d.T, d.n_kv,
              best * 1e3, flops / best / 1e9);
}
}  // namespace kernels_host_test
}  // namespace
