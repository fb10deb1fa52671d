// Each layer kind of the forward pass against a naive double-precision loop written from
// the formulas (MATH.md §1, §7), on preset-initialised random weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/layers.hpp"
#include "model/presets.hpp"

namespace {
namespace layers_test {
using hypic::Tensor;
using namespace hypic::model;

std::vector<float> randn(size_t n, unsigned seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// y[T, n] = x[T, k] · W[n, k]ᵀ with W rows [row0, row0 + n).
std::vector<double> matmul_t(const std::vector<double>& x, const Tensor& w, int T, int k, int row0,
                             int n) {
  std::vector<double> y(static_cast<size_t>(T) * n, 0.0);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < n; ++o) {
      double acc = 0;
      for (int i = 0; i < k; ++i)
        acc += x[static_cast<size_t>(t) * k + i] * w[static_cast<int64_t>(row0 + o) * k + i];
      y[static_cast<size_t>(t) * n + o] = acc;
    }
  return y;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

double max_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// Zero-centred RMSNorm of each hd-row in place.
void rms_rows(std::vector<double>& x, const Tensor& w, int rows, int cols, double eps) {
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int c = 0; c < cols; ++c)
      ss += x[static_cast<size_t>(r) * cols + c] * x[static_cast<size_t>(r) * cols + c];
    const double s = 1.0 / std::sqrt(ss / cols + eps);
    for (int c = 0; c < cols; ++c) x[static_cast<size_t>(r) * cols + c] *= s * (1.0 + w[c]);
  }
}

struct Fixture {
  ModelConfig cfg;
  ModelWeights w;
  Fixture(const std::string& arch, uint64_t seed)
      : cfg(preset_config(parse_arch(arch), "tiny")), w(random_weights(cfg, seed)) {}
  int first_layer(LayerKind kind) const {
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      if (cfg.layer_types[static_cast<size_t>(l)] == kind) return l;
    return -1;
  }
};

TEST(GdnLayer, MatchesNaiveRecurrenceWithConvStateAndCache) {
  Fixture f("qwen3_5", 3);
  const ModelConfig& c = f.cfg;
  const int l = f.first_layer(LayerKind::Linear);
  const GdnWeights& w = f.w.layers[static_cast<size_t>(l)].linear;
  const int hidden = c.hidden_size, Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, K = c.linear_conv_kernel_dim;
  const int kd = Hk * dk, vd = Hv * dv, C = c.linear_conv_dim();
  const int T = 70;  // crosses a 64-token chunk
  const double eps = c.rms_norm_eps;

  InferenceCache cache = InferenceCache::empty(c);
  LayerCache& lc = cache.layers[static_cast<size_t>(l)];
  lc.state = Tensor::from_vector(
      lc.state.shape(), randn(lc.state.values().size(), 4, 0.3f));  // a non-empty incoming state
  lc.conv = Tensor::from_vector(lc.conv.shape(), randn(lc.conv.values().size(), 5));
  const std::vector<double> S0 = to_double(lc.state.to_vector()),
                            conv0 = to_double(lc.conv.to_vector());
  const auto x = randn(static_cast<size_t>(T) * hidden, 6);
  std::vector<float> out(x.size(), 0.0f);
  Workspace ws;
  gdn_layer(hypic::kernels::host_backend(), c, w, x.data(), out.data(), T, lc, ws);

  // Naive reference.
  const auto xd = to_double(x);
  const auto mixed = matmul_t(xd, w.in_proj, T, hidden, 0, C);
  const auto z = matmul_t(xd, w.in_proj, T, hidden, C, vd);
  const auto ba = matmul_t(xd, w.in_proj, T, hidden, C + vd, 2 * Hv);
  std::vector<double> u(conv0);  // conv input stream: state ++ mixed
  u.insert(u.end(), mixed.begin(), mixed.end());
  std::vector<double> y(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; ++t)
    for (int ch = 0; ch < C; ++ch) {
      double a = 0;
      for (int j = 0; j < K; ++j)
        a += w.conv1d[ch * K + j] * u[static_cast<size_t>(t + j) * C + ch];
      y[static_cast<size_t>(t) * C + ch] = silu(a);
    }
  std::vector<double> S(S0), core(static_cast<size_t>(T) * vd);
  for (int t = 0; t < T; ++t) {
    const double* yt = &y[static_cast<size_t>(t) * C];
    for (int h = 0; h < Hv; ++h) {
      const int hk = h / (Hv / Hk);
      std::vector<double> q(yt + hk * dk, yt + hk * dk + dk),
          k(yt + kd + hk * dk, yt + kd + hk * dk + dk);
      for (auto* vec : {&q, &k}) {
        double ss = 0;
        for (double e : *vec) ss += e * e;
        for (double& e : *vec) e /= std::sqrt(ss + 1e-6);
      }
      for (double& e : q) e /= std::sqrt(static_cast<double>(dk));
      const double* v = yt + 2 * kd + h * dv;
      const double beta = sigmoid(ba[static_cast<size_t>(t) * 2 * Hv + h]);
      const double a = ba[static_cast<size_t>(t) * 2 * Hv + Hv + h] + w.dt_bias[h];
      const double g =
          -std::exp(static_cast<double>(w.A_log[h])) * (a > 20 ? a : std::log1p(std::exp(a)));
      double* Sh = &S[static_cast<size_t>(h) * dk * dv];
      for (int i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(g);
      for (int j = 0; j < dv; ++j) {
        double kv = 0;
        for (int i = 0; i < dk; ++i) kv += Sh[i * dv + j] * k[i];
        const double delta = beta * (v[j] - kv);
        for (int i = 0; i < dk; ++i) Sh[i * dv + j] += k[i] * delta;
      }
      for (int j = 0; j < dv; ++j) {
        double o = 0;
        for (int i = 0; i < dk; ++i) o += Sh[i * dv + j] * q[i];
        core[static_cast<size_t>(t) * vd + h * dv + j] = o;
      }
    }
  }
  std::vector<double> normed(core.size());
  for (int r = 0; r < T * Hv; ++r) {
    double ss = 0;
    for (int j = 0; j < dv; ++j)
      ss += core[static_cast<size_t>(r) * dv + j] * core[static_cast<size_t>(r) * dv + j];
    const double s = 1.0 / std::sqrt(ss / dv + eps);
    for (int j = 0; j < dv; ++j) {
      const size_t i = static_cast<size_t>(r) * dv + j;
      normed[i] = w.norm[j] * core[i] * s * silu(z[i]);
    }
  }
  const auto expect = matmul_t(normed, w.out_proj, T, vd, 0, hidden);
  EXPECT_LT(max_diff(out, expect), 2e-4);
  EXPECT_LT(max_diff(lc.state.to_vector(), S), 1e-4);
  std::vector<double> tail(u.end() - static_cast<long>((K - 1) * C), u.end());
  EXPECT_LT(max_diff(lc.conv.to_vector(), tail), 1e-6);
}

TEST(AttentionLayer, SecondBlockMatchesNaiveOverWholePrefix) {
  Fixture f("qwen3_5", 8);
  const ModelConfig& c = f.cfg;
  const int l = f.first_layer(LayerKind::FullAttention);
  const AttentionWeights& w = f.w.layers[static_cast<size_t>(l)].attn;
  const int hidden = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int hd = c.head_dim, rot = c.rotary_dim();
  const int T1 = 9, T2 = 140, T = T1 + T2;  // the second block spans two query blocks
  const auto x = randn(static_cast<size_t>(T) * hidden, 9);

  InferenceCache cache = InferenceCache::empty(c);
  LayerCache& lc = cache.layers[static_cast<size_t>(l)];
  Workspace ws;
  std::vector<float> out1(static_cast<size_t>(T1) * hidden, 0.0f),
      out2(static_cast<size_t>(T2) * hidden, 0.0f);
  attention_layer(hypic::kernels::host_backend(), c, w, x.data(), out1.data(), T1, 0, lc, ws);
  attention_layer(hypic::kernels::host_backend(), c, w, x.data() + static_cast<size_t>(T1) * hidden,
                  out2.data(), T2, T1, lc, ws);
  EXPECT_EQ(lc.kv_tokens(), T);
  EXPECT_THROW(
      attention_layer(hypic::kernels::host_backend(), c, w, x.data(), out1.data(), 1, 3, lc, ws),
      hypic::Error);

  const auto xd = to_double(x);
  const auto qg = matmul_t(xd, w.q_proj, T, hidden, 0, H * 2 * hd);
  auto k = matmul_t(xd, w.k_proj, T, hidden, 0, Hkv * hd);
  const auto v = matmul_t(xd, w.v_proj, T, hidden, 0, Hkv * hd);
  std::vector<double> q(static_cast<size_t>(T) * H * hd);
  for (int r = 0; r < T * H; ++r)
    for (int c2 = 0; c2 < hd; ++c2)
      q[static_cast<size_t>(r) * hd + c2] = qg[static_cast<size_t>(r) * 2 * hd + c2];
  rms_rows(q, w.q_norm, T * H, hd, c.rms_norm_eps);
  rms_rows(k, w.k_norm, T * Hkv, hd, c.rms_norm_eps);
  auto rope = [&](std::vector<double>& m, int heads) {
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < rot / 2; ++i) {
          const double ang = t * std::pow(c.rope_theta, -2.0 * i / rot);
          double* p = &m[(static_cast<size_t>(t) * heads + h) * hd];
          const double a = p[i], b = p[i + rot / 2];
          p[i] = a * std::cos(ang) - b * std::sin(ang);
          p[i + rot / 2] = b * std::cos(ang) + a * std::sin(ang);
        }
  };
  rope(q, H);
  rope(k, Hkv);
  EXPECT_LT(max_diff(lc.k.to_vector(), k), 1e-4);
  EXPECT_LT(max_diff(lc.v.to_vector(), v), 1e-5);
  std::vector<double> attn(static_cast<size_t>(T) * H * hd);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / Hkv);
      std::vector<double> s(static_cast<size_t>(t) + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int c2 = 0; c2 < hd; ++c2)
          dot += q[(static_cast<size_t>(t) * H + h) * hd + c2] *
                 k[(static_cast<size_t>(j) * Hkv + g) * hd + c2];
        s[j] = dot / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int c2 = 0; c2 < hd; ++c2) {
        double o = 0;
        for (int j = 0; j <= t; ++j)
          o += s[j] / sum * v[(static_cast<size_t>(j) * Hkv + g) * hd + c2];
        const double gate = qg[(static_cast<size_t>(t) * H + h) * 2 * hd + hd + c2];
        attn[(static_cast<size_t>(t) * H + h) * hd + c2] = o * sigmoid(gate);
      }
    }
  const auto expect = matmul_t(attn, w.o_proj, T, H * hd, 0, hidden);
  const std::vector<double> e1(expect.begin(), expect.begin() + static_cast<long>(T1) * hidden);
  const std::vector<double> e2(expect.begin() + static_cast<long>(T1) * hidden, expect.end());
  EXPECT_LT(max_diff(out1, e1), 1e-4);
  EXPECT_LT(max_diff(out2, e2), 1e-4);
}

// Naive SwiGLU of one token.
std::vector<double> naive_mlp(const MlpWeights& w, const double* x, int hidden) {
  const int I = static_cast<int>(w.down.dim(1));
  std::vector<double> xv(x, x + hidden);
  const auto gu = matmul_t(xv, w.gate_up, 1, hidden, 0, 2 * I);
  std::vector<double> act(static_cast<size_t>(I));
  for (int i = 0; i < I; ++i) act[i] = silu(gu[i]) * gu[I + i];
  return matmul_t(act, w.down, 1, I, 0, hidden);
}

TEST(MlpLayer, DenseSwigluAddsIntoResidual) {
  Fixture f("qwen3_5", 10);
  const MlpWeights& w = f.w.layers[0].mlp;
  const int hidden = f.cfg.hidden_size, T = 5;
  const auto x = randn(static_cast<size_t>(T) * hidden, 11);
  const auto res = randn(static_cast<size_t>(T) * hidden, 12);
  std::vector<float> out = res;
  Workspace ws;
  mlp_layer(hypic::kernels::host_backend(), w, x.data(), out.data(), T, hidden, ws);
  const auto xd = to_double(x);
  std::vector<double> expect(out.size());
  for (int t = 0; t < T; ++t) {
    const auto y = naive_mlp(w, &xd[static_cast<size_t>(t) * hidden], hidden);
    for (int c = 0; c < hidden; ++c)
      expect[static_cast<size_t>(t) * hidden + c] = res[static_cast<size_t>(t) * hidden + c] + y[c];
  }
  EXPECT_LT(max_diff(out, expect), 1e-5);
}

TEST(MoeLayer, MatchesNaivePerTokenRouting) {
  Fixture f("qwen3_next", 13);
  const ModelConfig& c = f.cfg;
  ASSERT_TRUE(f.w.layers[0].is_moe);
  const MoeWeights& w = f.w.layers[0].moe;
  const int hidden = c.hidden_size, E = c.num_experts, k = c.num_experts_per_tok, T = 33;
  const auto x = randn(static_cast<size_t>(T) * hidden, 14);
  std::vector<float> out(x.size(), 0.0f);
  Workspace ws;
  moe_layer(hypic::kernels::host_backend(), c, w, x.data(), out.data(), T, ws);

  const auto xd = to_double(x);
  std::vector<double> expect(out.size(), 0.0);
  for (int t = 0; t < T; ++t) {
    const double* xt = &xd[static_cast<size_t>(t) * hidden];
    std::vector<double> xv(xt, xt + hidden);
    const auto logits = matmul_t(xv, w.router, 1, hidden, 0, E);
    std::vector<double> p(static_cast<size_t>(E));
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - mx));
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double top = 0;
    for (int j = 0; j < k; ++j) top += p[order[j]];
    double* o = &expect[static_cast<size_t>(t) * hidden];
    for (int j = 0; j < k; ++j) {
      const auto y = naive_mlp(w.experts[static_cast<size_t>(order[j])], xt, hidden);
      const double wt = c.norm_topk_prob ? p[order[j]] / top : p[order[j]] / sum;
      for (int i = 0; i < hidden; ++i) o[i] += wt * y[i];
    }
    const auto ys = naive_mlp(w.shared_expert, xt, hidden);
    const double gate = sigmoid(matmul_t(xv, w.shared_expert_gate, 1, hidden, 0, 1)[0]);
    for (int i = 0; i < hidden; ++i) o[i] += gate * ys[i];
  }
  EXPECT_LT(max_diff(out, expect), 1e-5);
}

}  // namespace layers_test
}  // namespace
