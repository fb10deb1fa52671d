// Summary storage sizes, structure conversions, the conv tail across a segment boundary, and
// (disabled, ad hoc) the WY-versus-dense measurements behind lowrank_max_tokens.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <vector>

#include "hypic/kernels/conv.hpp"
#include "hypic/kernels/linear_family.hpp"
#include "pic/linear_summary.hpp"

namespace {
namespace linear_summary_test {
namespace pic = hypic::pic;
namespace kn = hypic::kernels;
using kn::TStructure;

TEST(LinearSummary, BytesPerStructureAndDtype) {
  // Qwen3.5 GDN layer: 32 value heads, dk = dv = 128. S alone is 32·128·128 floats.
  const size_t s_floats = 32u * 128 * 128;
  EXPECT_EQ(pic::summary_bytes(TStructure::Scalar, 32, 128, 128, 0, hypic::DType::F32),
            (s_floats + 32) * 4);
  EXPECT_EQ(pic::summary_bytes(TStructure::Diagonal, 32, 128, 128, 0, hypic::DType::BF16),
            (s_floats + 32 * 128) * 2);
  EXPECT_EQ(pic::summary_bytes(TStructure::Dense, 32, 128, 128, 0, hypic::DType::F16),
            2 * s_floats * 2);
  EXPECT_EQ(pic::summary_bytes(TStructure::LowRank, 32, 128, 128, 16, hypic::DType::F32),
            (s_floats + 32u * (128 + 2 * 16 * 128)) * 4);
  // Below the threshold the WY form is smaller than dense.
  const int r = pic::lowrank_max_tokens(128);
  EXPECT_LT(pic::summary_bytes(TStructure::LowRank, 32, 128, 128, r, hypic::DType::F32),
            pic::summary_bytes(TStructure::Dense, 32, 128, 128, 0, hypic::DType::F32));
}

TEST(LinearSummary, ConvertWidensOnly) {
  pic::LinearSummary s;
  s.structure = TStructure::Scalar;
  s.heads = 2;
  s.dk = 3;
  s.dv = 1;
  s.t = {0.5f, 0.25f};
  s.s = {1, 2, 3, 4, 5, 6};
  const auto d = pic::convert(hypic::kernels::host_backend(), s, TStructure::Dense);
  EXPECT_EQ(d.t.size(), 18u);
  EXPECT_EQ(d.t[0], 0.5f);
  EXPECT_EQ(d.t[4], 0.5f);
  EXPECT_EQ(d.t[9], 0.25f);
  EXPECT_EQ(d.t[1], 0.0f);
  EXPECT_THROW(pic::convert(hypic::kernels::host_backend(), d, TStructure::Scalar),
               std::invalid_argument);
  std::vector<float> a = {1, 1, 1, 1, 1, 1}, b = a;
  pic::apply(hypic::kernels::host_backend(), s, a.data());
  pic::apply(hypic::kernels::host_backend(), d, b.data());
  EXPECT_EQ(a, b);
}

// Conv tail across a segment boundary: the cached tail of segment A warms up the first tokens
// of segment B exactly as one pass over A ++ B; without it only those first K−1 tokens differ.
TEST(LinearSummary, ConvTailWarmUpEqualsOnePass) {
  const int C = 12, K = 4, TA = 9, TB = 7;
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(TA + TB) * C), w(C * K);
  for (auto& e : x) e = n01(rng);
  for (auto& e : w) e = n01(rng);

  std::vector<float> st(static_cast<size_t>(K - 1) * C, 0.0f), y(x.size());
  kn::causal_conv1d_silu(x.data(), w.data(), st.data(), y.data(), TA + TB, C, K);

  // Segment A's tail, computed alone (as a cold segment entry would be).
  for (int w_len : {K - 1, K + 1, 1}) {
    std::vector<float> tail(static_cast<size_t>(K - 1) * C, 0.0f);
    kn::causal_conv1d_tail(x.data(), tail.data(), TA, C, K);
    // Warm-up: B's first w_len tokens from the tail.
    std::vector<float> yb(static_cast<size_t>(w_len) * C), st_b = tail;
    kn::causal_conv1d_silu(x.data() + TA * C, w.data(), st_b.data(), yb.data(), w_len, C, K);
    for (size_t i = 0; i < yb.size(); ++i) EXPECT_EQ(yb[i], y[TA * C + i]) << "w=" << w_len;
  }
  // B in isolation is exact from token K−1 on; the first K−1 need the tail.
  std::vector<float> zero(static_cast<size_t>(K - 1) * C, 0.0f), yb(static_cast<size_t>(TB) * C);
  kn::causal_conv1d_silu(x.data() + TA * C, w.data(), zero.data(), yb.data(), TB, C, K);
  for (int t = K - 1; t < TB; ++t)
    for (int c = 0; c < C; ++c) EXPECT_EQ(yb[t * C + c], y[(TA + t) * C + c]);
  // The tail of a piece shorter than K−1 carries part of the previous tail.
  std::vector<float> t1(static_cast<size_t>(K - 1) * C, 0.0f), t2 = t1;
  kn::causal_conv1d_tail(x.data(), t1.data(), TA + 2, C, K);
  kn::causal_conv1d_tail(x.data(), t2.data(), TA, C, K);
  kn::causal_conv1d_tail(x.data() + TA * C, t2.data(), 2, C, K);
  EXPECT_EQ(t1, t2);
}

// Ad hoc: WY versus dense for a Qwen3.5-sized GDN layer (32 heads, dk = dv = 128), segments
// shorter than dk. Disabled: it measures time (speed lives in benchmarks, not in the
// suite). Run with --gtest_also_run_disabled_tests.
TEST(LinearSummary, DISABLED_LowRankVersusDense) {
  const int H = 32, Hk = 16, dk = 128, dv = 128, Tmax = 128;
  std::mt19937 rng(1);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(Tmax) * Hk * dk), k(q.size());
  std::vector<float> v(static_cast<size_t>(Tmax) * H * dv), g(Tmax * H), beta(g.size());
  for (auto* x : {&q, &k})
    for (size_t r = 0; r < x->size() / dk; ++r) {
      float ss = 0.0f;
      for (int c = 0; c < dk; ++c) ss += ((*x)[r * dk + c] = n01(rng)) * (*x)[r * dk + c];
      for (int c = 0; c < dk; ++c) (*x)[r * dk + c] /= std::sqrt(ss);
    }
  for (auto& e : v) e = n01(rng);
  for (auto& e : g) e = -0.1f * std::fabs(n01(rng));
  for (auto& e : beta) e = 1.0f / (1.0f + std::exp(-n01(rng)));
  const kn::FamilySpec spec = kn::member_spec(kn::Member::GatedDeltaNet);
  const kn::FamilyInputs in{q.data(), k.data(), v.data(), g.data(), beta.data()};
  std::vector<float> state(static_cast<size_t>(H) * dk * dv, 0.1f);
  auto time = [](auto&& f, int reps) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
      const std::clock_t c0 = std::clock();
      f();
      best = std::min(best, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    }
    return best * 1e3;
  };
  std::printf("[ wy ] tokens | build ms: dense  wy | apply ms: dense  wy | MiB f32: dense  wy\n");
  for (int n : {1, 2, 4, 8, 16, 32, 48, 63, 64, 80, 96, 127}) {
    const kn::FamilyDims d{n, Hk, H, dk, dv};
    pic::LinearSummary dn, lr;
    const double bd = time(
        [&] {
          dn = pic::summarize(hypic::kernels::host_backend(), spec, d, in, nullptr,
                              pic::TForm::Natural, 64);
        },
        5);
    const double bl = time(
        [&] {
          lr = pic::summarize(hypic::kernels::host_backend(), spec, d, in, nullptr,
                              pic::TForm::LowRank);
        },
        5);
    const double ad =
        time([&] { pic::apply(hypic::kernels::host_backend(), dn, state.data()); }, 20);
    const double al =
        time([&] { pic::apply(hypic::kernels::host_backend(), lr, state.data()); }, 20);
    std::printf("[ wy ] %6d | %8.3f %7.3f | %8.3f %7.3f | %8.3f %7.3f\n", n, bd, bl, ad, al,
                dn.bytes(hypic::DType::F32) / 1048576.0, lr.bytes(hypic::DType::F32) / 1048576.0);
  }
}

}  // namespace linear_summary_test
}  // namespace

namespace {
namespace linear_summary_test {
// ‖T·S_in‖ / ‖T·S_in + S(C|0)‖ on cases worked out by hand.
TEST(LinearSummary, StateContributionKnownAnswers) {
  const auto& host = hypic::kernels::host_backend();
  pic::LinearSummary s;  // one head, dk = dv = 2, T = 0.5·I
  s.structure = TStructure::Scalar;
  s.heads = 1;
  s.dk = s.dv = 2;
  s.t = {0.5f};
  s.s = {0, 0, 0, std::sqrt(3.0f)};
  const std::vector<float> in = {2, 0, 0, 0};
  // T·S_in = [[1,0],[0,0]] ⟂ S(C|0): ‖·‖ = 1 against ‖S‖ = √(1 + 3) = 2.
  EXPECT_NEAR(pic::state_contribution(host, s, in.data()), 0.5, 1e-6);
  EXPECT_EQ(in, (std::vector<float>{2, 0, 0, 0}));  // S_in is not changed
  const std::vector<float> zero(4, 0.0f);
  EXPECT_EQ(pic::state_contribution(host, s, zero.data()), 0.0);  // nothing comes in
  s.s.assign(4, 0.0f);
  EXPECT_NEAR(pic::state_contribution(host, s, in.data()), 1.0, 1e-7);  // only S_in is left

  pic::LinearSummary d;  // dense T swapping the two key rows, dv = 1
  d.structure = TStructure::Dense;
  d.heads = 1;
  d.dk = 2;
  d.dv = 1;
  d.t = {0, 1, 1, 0};
  d.s = {4, 3};
  const std::vector<float> v = {3, 4};  // T·S_in = [4, 3]; S = [8, 6]: 5 / 10
  EXPECT_NEAR(pic::state_contribution(host, d, v.data()), 0.5, 1e-7);
  d.s = {-4, -3};  // S = 0: defined as 0
  EXPECT_EQ(pic::state_contribution(host, d, v.data()), 0.0);
}
}  // namespace linear_summary_test
}  // namespace
