// Causal conv1d + SiLU: against a naive loop, and continuation through the conv state.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hypic/kernels/conv.hpp"

namespace {
namespace conv_test {

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

// Naive: pad with the state, convolve, SiLU.
std::vector<float> naive(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& state, int T, int C, int K) {
  std::vector<double> u(static_cast<size_t>(T + K - 1) * C);
  for (size_t i = 0; i < state.size(); ++i) u[i] = state[i];
  for (size_t i = 0; i < x.size(); ++i) u[state.size() + i] = x[i];
  std::vector<float> y(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double a = 0.0;
      for (int j = 0; j < K; ++j) a += w[c * K + j] * u[static_cast<size_t>(t + j) * C + c];
      y[static_cast<size_t>(t) * C + c] = static_cast<float>(a / (1.0 + std::exp(-a)));
    }
  return y;
}

TEST(CausalConv1d, MatchesNaiveLoop) {
  const int C = 24, K = 4;
  for (int T : {1, 2, 3, 4, 17}) {
    auto x = randn(static_cast<size_t>(T) * C, T), w = randn(C * K, 99);
    auto state = randn(static_cast<size_t>(K - 1) * C, 5);
    const auto expect = naive(x, w, state, T, C, K);
    std::vector<float> y(expect.size());
    std::vector<float> st = state;
    hypic::kernels::causal_conv1d_silu(x.data(), w.data(), st.data(), y.data(), T, C, K);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expect[i], 1e-5f) << "T=" << T;
    // Tail: the last K-1 rows of state ++ x.
    std::vector<float> u = state;
    u.insert(u.end(), x.begin(), x.end());
    for (int r = 0; r < K - 1; ++r)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(st[r * C + c], u[static_cast<size_t>(T + r) * C + c]) << "T=" << T;
  }
}

// A sequence split in two with the tail carried equals one pass, for every split point,
// including pieces shorter than the tail.
TEST(CausalConv1d, SplitWithCarriedTailEqualsOnePass) {
  const int C = 16, K = 4, T = 20;
  auto x = randn(static_cast<size_t>(T) * C, 1), w = randn(C * K, 2);
  std::vector<float> st(static_cast<size_t>(K - 1) * C, 0.0f), y(static_cast<size_t>(T) * C);
  hypic::kernels::causal_conv1d_silu(x.data(), w.data(), st.data(), y.data(), T, C, K);
  for (int split = 0; split <= T; ++split) {
    std::vector<float> s2(st.size(), 0.0f), y2(y.size());
    hypic::kernels::causal_conv1d_silu(x.data(), w.data(), s2.data(), y2.data(), split, C, K);
    hypic::kernels::causal_conv1d_silu(x.data() + split * C, w.data(), s2.data(),
                                       y2.data() + split * C, T - split, C, K);
    EXPECT_EQ(y2, y) << "split=" << split;
    EXPECT_EQ(s2, st) << "split=" << split;
  }
}

}  // namespace conv_test
}  // namespace
