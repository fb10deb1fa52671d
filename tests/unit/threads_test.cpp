// Threads (#15, #17): every host kernel, the tiled GEMM, a whole prefill and a segment entry
// give bit-identical results at 1, 2 and 3 threads; the thread count is chosen as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cluster/world.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/threads.hpp"
#include "model/arch/arch.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/segment_entry.hpp"
#include "store/entry.hpp"

namespace {
namespace threads_test {
namespace kn = hypic::kernels;
using Vec = std::vector<float>;

Vec randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Restores the thread count a test found. Every loop of more than one item runs on the team
// (no minimum work), so that the small shapes here take the parallel path at 2 and 3 threads.
class Threads : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = kn::threads();
    min_work_ = kn::min_parallel_work();
    kn::set_min_parallel_work(0);
  }
  void TearDown() override {
    kn::set_threads(before_);
    kn::set_min_parallel_work(min_work_);
  }

  // run() computes from fresh copies of its inputs; its result must not change with the count.
  static void expect_same_at_every_count(const std::string& what, const std::function<Vec()>& run) {
    kn::set_threads(1);
    const Vec one = run();
    ASSERT_FALSE(one.empty()) << what;
    for (int t : {2, 3}) {
      kn::set_threads(t);
      const Vec many = run();
      ASSERT_EQ(many.size(), one.size()) << what;
      EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0)
          << what << " differs at " << t << " threads from 1 thread";
    }
  }
  const kn::Backend& be() const { return kn::host_backend(); }

 private:
  int before_ = 1;
  int64_t min_work_ = kn::kDefaultMinParallelWork;
};

TEST_F(Threads, GemmTilesDependOnTheShapeOnlyAndCoverC) {
  for (int t : {1, 2, 7}) {
    kn::set_threads(t);
    const kn::GemmTiling big = kn::gemm_tiling(512, 2048, 1024);
    EXPECT_GT(big.tiles(), 1);
    EXPECT_GE(int64_t(big.tm) * big.mb, 512);
    EXPECT_GE(int64_t(big.tn) * big.nb, 2048);
    EXPECT_LT(int64_t(big.tm - 1) * big.mb, 512);
    EXPECT_LT(int64_t(big.tn - 1) * big.nb, 2048);
    const kn::GemmTiling small = kn::gemm_tiling(64, 128, 128);
    EXPECT_EQ(small.tiles(), 1);  // a head's product stays one call
    const kn::GemmTiling again = kn::gemm_tiling(512, 2048, 1024);
    EXPECT_EQ(again.mb, big.mb);
    EXPECT_EQ(again.nb, big.nb);
  }
}

TEST_F(Threads, LinearSplitsTheColumnsOfProductsWithFewRows) {
  for (int t : {1, 2, 7}) {
    kn::set_threads(t);
    // A pic query's junction pass: 160 rows, too few to split; the columns split instead.
    for (const auto& [m, n, k] : {std::tuple{160, 768, 256}, std::tuple{160, 256, 512},
                                  std::tuple{8, 768, 256}, std::tuple{1, 4096, 1024}}) {
      const kn::GemmTiling lt = kn::linear_tiling(m, n, k);
      EXPECT_EQ(lt.tm, 1) << m << "x" << n << "x" << k;
      EXPECT_GT(lt.tn, 1) << m << "x" << n << "x" << k;
      EXPECT_GE(lt.nb, 128);
      EXPECT_GE(int64_t(lt.tn) * lt.nb, n);
      EXPECT_LT(int64_t(lt.tn - 1) * lt.nb, n);
    }
    // Row-split products keep gemm's tiles; a head-sized product stays one call.
    const kn::GemmTiling big = kn::gemm_tiling(1024, 2048, 1024);
    const kn::GemmTiling lbig = kn::linear_tiling(1024, 2048, 1024);
    EXPECT_EQ(lbig.mb, big.mb);
    EXPECT_EQ(lbig.nb, big.nb);
    EXPECT_EQ(kn::linear_tiling(64, 128, 64).tiles(), 1);
  }
}

TEST_F(Threads, LinearIsBitIdenticalAtEveryThreadCount) {
  for (const auto& [m, n, k] :
       {std::tuple{160, 768, 256}, std::tuple{8, 1000, 300}, std::tuple{1, 4096, 1024}}) {
    const Vec x = randn(size_t(m) * k, 7), w = randn(size_t(n) * k, 8);
    expect_same_at_every_count(
        "linear " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), [&] {
          Vec y(size_t(m) * n);
          kn::linear(x.data(), w.data(), y.data(), m, n, k);
          return y;
        });
  }
}

TEST_F(Threads, GemmIsBitIdenticalAtEveryThreadCount) {
  // k = 3000 is a depth at which OpenBLAS's own threading sums in another order (#17).
  struct Shape {
    bool ta, tb;
    int m, n, k;
  };
  for (const Shape& s : {Shape{false, true, 300, 700, 3000}, Shape{false, false, 513, 257, 300},
                         Shape{true, false, 257, 640, 200}, Shape{true, true, 130, 1030, 129},
                         Shape{false, true, 1, 4096, 1024}}) {
    const Vec a = randn(size_t(s.m) * s.k, 1), b = randn(size_t(s.k) * s.n, 2),
              c0 = randn(size_t(s.m) * s.n, 3);
    expect_same_at_every_count(
        "gemm " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k), [&] {
          Vec c = c0;
          kn::gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), s.ta ? s.m : s.k, b.data(),
                   s.tb ? s.k : s.n, 0.25f, c.data(), s.n);
          return c;
        });
  }
}

TEST_F(Threads, LinearFamilyIsBitIdenticalAtEveryThreadCount) {
  const kn::FamilyDims d{200, 2, 6, 48, 40};
  const Vec q = randn(size_t(d.T) * d.Hk * d.dk, 4, 0.2f), k = randn(q.size(), 5, 0.2f),
            v = randn(size_t(d.T) * d.Hv * d.dv, 6);
  Vec g = randn(size_t(d.T) * d.Hv * d.dk, 7, 0.05f), beta = randn(size_t(d.T) * d.Hv, 8, 0.3f);
  for (float& x : g) x = -std::fabs(x);
  for (float& x : beta) x = 1.0f / (1.0f + std::exp(-x));
  const Vec s0 = randn(size_t(d.Hv) * d.dk * d.dv, 9, 0.1f);
  for (kn::Member m : {kn::Member::GatedDeltaNet, kn::Member::KDA, kn::Member::GLA}) {
    const kn::FamilySpec spec = kn::member_spec(m);
    const kn::FamilyInputs in{q.data(), k.data(), v.data(), g.data(), beta.data()};
    const size_t tr = size_t(kn::transition_floats_per_head(kn::natural_structure(spec), d.dk));
    expect_same_at_every_count(std::string("family_chunked ") + kn::member_name(m), [&] {
      Vec state = s0, out(size_t(d.T) * d.Hv * d.dv), trans(tr * d.Hv);
      be().family_chunked(spec, d, in, state.data(), out.data(), trans.data(), 64);
      out.insert(out.end(), state.begin(), state.end());
      out.insert(out.end(), trans.begin(), trans.end());
      return out;
    });
    expect_same_at_every_count(std::string("family_recurrent_f32 ") + kn::member_name(m), [&] {
      Vec state = s0, out(size_t(d.T) * d.Hv * d.dv);
      be().family_recurrent_f32(spec, d, in, state.data(), out.data());
      out.insert(out.end(), state.begin(), state.end());
      return out;
    });
  }
  const kn::FamilySpec kda = kn::member_spec(kn::Member::KDA);
  const kn::FamilyDims one{60, 2, 6, 48, 40};
  expect_same_at_every_count("family_chunked_lowrank", [&] {
    Vec state = s0, out(size_t(one.T) * one.Hv * one.dv), tdiag(size_t(one.Hv) * one.dk),
        x(size_t(one.Hv) * one.T * one.dk), y(x.size());
    be().family_chunked_lowrank(kda, one, {q.data(), k.data(), v.data(), g.data(), beta.data()},
                                state.data(), out.data(), tdiag.data(), x.data(), y.data());
    for (const Vec* p : {&state, &tdiag, &x, &y}) out.insert(out.end(), p->begin(), p->end());
    return out;
  });
}

TEST_F(Threads, AttentionConvNormsGatesRopeAreBitIdenticalAtEveryThreadCount) {
  const int T = 300, H = 8, Hkv = 2, hd = 64, past = 50;
  const kn::AttentionDims ad{T, T + past, H, Hkv, hd, 0.125f};
  const Vec q = randn(size_t(T) * H * hd, 10), kk = randn(size_t(T + past) * Hkv * hd, 11),
            vv = randn(kk.size(), 12);
  expect_same_at_every_count("attention_causal", [&] {
    Vec out(q.size()), work(be().attention_workspace_floats(ad));
    be().attention_causal(ad, q.data(), kk.data(), vv.data(), out.data(), work.data());
    return out;
  });
  const int C = 320, K = 4;
  const Vec x = randn(size_t(T) * C, 13), w = randn(size_t(C) * K, 14),
            tail = randn(size_t(K - 1) * C, 15), z = randn(x.size(), 16), nw = randn(C, 17);
  expect_same_at_every_count("causal_conv1d_silu", [&] {
    Vec state = tail, y(x.size());
    be().causal_conv1d_silu(x.data(), w.data(), state.data(), y.data(), T, C, K);
    y.insert(y.end(), state.begin(), state.end());
    return y;
  });
  expect_same_at_every_count("norms", [&] {
    Vec a(x.size()), b(x.size()), c = x;
    be().rms_norm_zero_centred(x.data(), nw.data(), a.data(), T, C, 1e-6f);
    be().gated_rms_norm(x.data(), z.data(), nw.data(), b.data(), T, C, 1e-6f);
    be().l2_normalize_rows(c.data(), T, C, 1e-6f, 0.5f);
    a.insert(a.end(), b.begin(), b.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  });
  expect_same_at_every_count("activations and gates", [&] {
    Vec a(size_t(T) * (C / 2)), b = x, c = x, beta(size_t(T) * 4), g(beta.size());
    be().swiglu(x.data(), a.data(), T, C / 2);
    be().sigmoid_gate(b.data(), z.data(), T, C, C);
    be().add_sigmoid_scaled(c.data(), z.data(), nw.data(), T, C);
    be().gdn_gates(x.data(), z.data(), C, nw.data(), nw.data() + 4, beta.data(), g.data(), T, 4);
    for (const Vec* p : {&b, &c, &beta, &g}) a.insert(a.end(), p->begin(), p->end());
    return a;
  });
  const kn::RopeDims rd{T, H, hd, 32, 10000.0f};
  expect_same_at_every_count("rope", [&] {
    Vec a = q, b = q, c = q, m = randn(size_t(hd) * 500, 18);
    be().rope_apply(rd, a.data(), 7);
    be().rope_shift(rd, b.data(), -40);
    be().rotary_rotate_rows({32, 10000.0f, true}, c.data(), T * H, hd, hd, 11);
    be().rotary_rotate_columns({32, 10000.0f, false}, m.data(), hd, 500, 13);
    for (const Vec* p : {&b, &c, &m}) a.insert(a.end(), p->begin(), p->end());
    return a;
  });
  expect_same_at_every_count("copies", [&] {
    Vec a(size_t(T) * 100), b(size_t(T) * C);
    std::vector<int32_t> ids(T);
    for (int i = 0; i < T; ++i) ids[i] = (i * 7) % T;
    be().copy_strided(x.data(), C, 17, a.data(), T, 100);
    be().gather_rows(x.data(), C, ids.data(), T, b.data());
    a.insert(a.end(), b.begin(), b.end());
    return a;
  });
}

TEST_F(Threads, MoeAndComposeAreBitIdenticalAtEveryThreadCount) {
  const int T = 300, E = 16, top = 4, hidden = 256;
  const Vec logits = randn(size_t(T) * E, 20), x = randn(size_t(T) * hidden, 21);
  expect_same_at_every_count("moe route, gather, scatter", [&] {
    std::vector<int> experts(size_t(T) * top), start(E + 1), ids(experts.size()), work(E);
    Vec weights(experts.size()), out(x.size(), 0.0f);
    hypic::kernels::MoeRouteSpec route;
    route.experts = E;
    route.top_k = top;
    be().moe_route(route, logits.data(), nullptr, T, experts.data(), weights.data());
    be().moe_group(experts.data(), T, top, E, start.data(), ids.data(), work.data());
    for (int e = 0; e < E; ++e) {
      const int n = start[e + 1] - start[e];
      Vec xe(size_t(n) * hidden);
      be().moe_gather(x.data(), hidden, ids.data() + start[e], n, top, xe.data());
      for (float& v : xe) v *= 1.5f;  // stands in for the expert
      be().moe_scatter_add(xe.data(), hidden, ids.data() + start[e], n, top, weights.data(),
                           out.data());
    }
    for (int e : experts) out.push_back(float(e));
    out.insert(out.end(), weights.begin(), weights.end());
    return out;
  });
  const int H = 6, dk = 48, dv = 40;
  const Vec dense = randn(size_t(H) * dk * dk, 22, 0.1f), diag = randn(size_t(H) * dk, 23),
            s0 = randn(size_t(H) * dk * dv, 24), st0 = randn(s0.size(), 25);
  expect_same_at_every_count("compose_states", [&] {
    Vec a = st0, b = st0;
    kn::TransitionRef sums[2];
    sums[0] = {kn::TStructure::Dense, H, dk, dv, 0, dense.data(), nullptr, nullptr, s0.data()};
    sums[1] = {kn::TStructure::Diagonal, H, dk, dv, 0, diag.data(), nullptr, nullptr, s0.data()};
    float* states[2] = {a.data(), b.data()};
    be().compose_states(sums, states, 2, false);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  });
}

// The model and the segment entries the store keeps: a prefill's logits and every array of an
// entry are bit-identical at 1, 2 and 3 threads (the condition README states).
TEST_F(Threads, PrefillAndSegmentEntriesAreBitIdenticalAtEveryThreadCount) {
  namespace model = hypic::model;
  model::ModelConfig cfg = model::preset_config(model::parse_arch("qwen3_5"), "small");
  // A wider MLP: its down projection sums over k = 1200, a depth at which OpenBLAS's own
  // threads sum in another order than its single thread (so this test sees that difference).
  cfg.intermediate_size = 1200;
  model::Model net(cfg, model::random_weights(cfg, 3));
  std::mt19937 rng(4);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> ids(200);
  for (auto& t : ids) t = tok(rng);
  expect_same_at_every_count("prefill logits", [&] {
    auto cache = net.new_cache();
    return net.prefill(ids, cache, model::LogitsMode::All).to_vector();
  });
  expect_same_at_every_count("segment entry", [&] {
    const hypic::pic::SegmentEntry e = hypic::pic::compute_entry(net, ids, 8);
    const hypic::store::Entry stored = hypic::pic::to_store_entry(e);
    Vec all;
    for (const auto& [name, t] : stored.arrays) {
      const Vec v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  });
}

TEST(ThreadChoice, FlagThenOmpThenSlurmThenTheRanksShareOfItsNode) {
  using hypic::cluster::choose_threads;
  using hypic::cluster::WorldInfo;
  auto env = [](std::vector<std::pair<std::string, std::string>> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
      for (const auto& [k, v] : vars)
        if (k == name) return v;
      return std::nullopt;
    };
  };
  WorldInfo alone;
  alone.node_cpus = alone.own_cpus = 16;
  WorldInfo shared = alone;
  shared.local_size = 4;  // 4 ranks on the node, not bound
  WorldInfo bound = shared;
  bound.own_cpus = 2;  // bound to 2 cores each
  EXPECT_EQ(choose_threads(3, shared, env({{"OMP_NUM_THREADS", "8"}})).threads, 3);
  EXPECT_EQ(choose_threads(3, shared, env({})).source, "--threads");
  EXPECT_EQ(choose_threads(0, alone, env({{"OMP_NUM_THREADS", "5,2"}})).threads, 5);
  EXPECT_EQ(choose_threads(0, alone, env({{"OMP_NUM_THREADS", "x"}})).threads, 16);
  EXPECT_EQ(choose_threads(0, alone, env({{"SLURM_CPUS_PER_TASK", "6"}})).threads, 6);
  EXPECT_EQ(choose_threads(0, bound, env({{"SLURM_CPUS_PER_TASK", "6"}})).threads, 2);
  EXPECT_EQ(choose_threads(0, alone, env({})).threads, 16);
  EXPECT_EQ(choose_threads(0, shared, env({})).threads, 4);  // never oversubscribed
  EXPECT_EQ(choose_threads(0, bound, env({})).threads, 2);
}

TEST(ThreadCount, SetThreadsIsWhatTheKernelsUse) {
  const int before = kn::threads();
  kn::set_threads(3);
  EXPECT_EQ(kn::threads(), kn::threading_compiled() ? 3 : 1);
  kn::set_threads(0);  // at least one
  EXPECT_EQ(kn::threads(), 1);
  EXPECT_EQ(kn::blas_info().threads, 1);
  kn::set_threads(before);
}

}  // namespace threads_test
}  // namespace
