#pragma once
// Plain reference implementations of the backend ops for the op harness
// (backend_ops_test.cpp): straightforward loops in double, written from the definitions in
// MATH.md and the op comments, sharing no code with kernels/. Row-major throughout; inputs and
// outputs are float vectors, so a reference can be compared with any backend's result.
// Also the random inputs the op harness and the family tests (family_plan_test.cpp) share; the
// family's take a kernels::Member, whose decay and erase come from kernels::member_spec.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hypic/kernels/linear_family.hpp"

namespace hypic::ref {

using Vec = std::vector<float>;

// Random inputs of the op harness and the real-shape cases (backend_real_shapes_test.cpp).
inline Vec randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = d(rng);
  return v;
}
inline Vec uniform(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline double silu(double x) {
  return x * sigmoid(x);
}
inline double softplus(double x) {
  return x > 30.0 ? x : std::log1p(std::exp(x));
}

// C = alpha · op(A) · op(B) + beta · C, op(A)[i, p] = trans_a ? A[p·lda + i] : A[i·lda + p].
inline void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const Vec& a, int lda,
                 const Vec& b, int ldb, double beta, Vec& c, int ldc, size_t a0 = 0, size_t b0 = 0,
                 size_t c0 = 0) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double x = ta ? a[a0 + size_t(p) * lda + i] : a[a0 + size_t(i) * lda + p];
        const double y = tb ? b[b0 + size_t(j) * ldb + p] : b[b0 + size_t(p) * ldb + j];
        s += x * y;
      }
      float& out = c[c0 + size_t(i) * ldc + j];
      out = static_cast<float>(alpha * s + (beta == 0.0 ? 0.0 : beta * out));
    }
}

// ---- linear-attention family (MATH.md §1): S_t = (I − β k kᵀ)·D_t·S_{t−1} + β k vᵀ ----
struct FamilyCase {
  int decay = 0;  // 0 none, 1 scalar, 2 diagonal
  bool delta = false;
  int T = 0, Hk = 0, Hv = 0, dk = 0, dv = 0;
};

// state [Hv, dk, dv] in/out, out [T, Hv, dv]; trans [Hv, dk, dk] receives A_T ⋯ A_1 (dense,
// whatever the member's structure).
inline void family(const FamilyCase& c, const Vec& q, const Vec& k, const Vec& v, const Vec& g,
                   const Vec& beta, Vec& state, Vec& out, Vec& trans) {
  const int dk = c.dk, dv = c.dv, ratio = c.Hv / c.Hk;
  out.assign(size_t(c.T) * c.Hv * dv, 0.0f);
  trans.assign(size_t(c.Hv) * dk * dk, 0.0f);
  for (int h = 0; h < c.Hv; ++h) {
    const int hk = h / ratio;
    std::vector<double> S(size_t(dk) * dv), Tm(size_t(dk) * dk, 0.0), decay(dk);
    for (size_t i = 0; i < S.size(); ++i) S[i] = state[size_t(h) * dk * dv + i];
    for (int i = 0; i < dk; ++i) Tm[size_t(i) * dk + i] = 1.0;
    for (int t = 0; t < c.T; ++t) {
      const float* kt = k.data() + (size_t(t) * c.Hk + hk) * dk;
      const float* qt = q.data() + (size_t(t) * c.Hk + hk) * dk;
      const float* vt = v.data() + (size_t(t) * c.Hv + h) * dv;
      for (int i = 0; i < dk; ++i)
        decay[i] = c.decay == 0   ? 1.0
                   : c.decay == 1 ? std::exp(double(g[size_t(t) * c.Hv + h]))
                                  : std::exp(double(g[(size_t(t) * c.Hv + h) * dk + i]));
      const double b = c.delta ? double(beta[size_t(t) * c.Hv + h]) : 1.0;
      // X ← D X for X = S and X = Tm, then the erase X ← X − β k (kᵀ X).
      for (int i = 0; i < dk; ++i) {
        for (int j = 0; j < dv; ++j) S[size_t(i) * dv + j] *= decay[i];
        for (int j = 0; j < dk; ++j) Tm[size_t(i) * dk + j] *= decay[i];
      }
      if (c.delta) {
        for (int j = 0; j < dv; ++j) {
          double kS = 0;
          for (int i = 0; i < dk; ++i) kS += kt[i] * S[size_t(i) * dv + j];
          for (int i = 0; i < dk; ++i) S[size_t(i) * dv + j] -= b * kt[i] * kS;
        }
        for (int j = 0; j < dk; ++j) {
          double kT = 0;
          for (int i = 0; i < dk; ++i) kT += kt[i] * Tm[size_t(i) * dk + j];
          for (int i = 0; i < dk; ++i) Tm[size_t(i) * dk + j] -= b * kt[i] * kT;
        }
      }
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) S[size_t(i) * dv + j] += b * kt[i] * vt[j];
      for (int j = 0; j < dv; ++j) {
        double o = 0;
        for (int i = 0; i < dk; ++i) o += S[size_t(i) * dv + j] * qt[i];
        out[(size_t(t) * c.Hv + h) * dv + j] = static_cast<float>(o);
      }
    }
    for (size_t i = 0; i < S.size(); ++i) state[size_t(h) * dk * dv + i] = float(S[i]);
    for (size_t i = 0; i < Tm.size(); ++i) trans[size_t(h) * dk * dk + i] = float(Tm[i]);
  }
}

// Every member of the family, for the tests that cover them all.
inline constexpr kernels::Member kFamilyMembers[] = {kernels::Member::LinearAttention,
                                                     kernels::Member::RetNet,
                                                     kernels::Member::Mamba2,
                                                     kernels::Member::GLA,
                                                     kernels::Member::DeltaNet,
                                                     kernels::Member::GatedDeltaNet,
                                                     kernels::Member::KDA,
                                                     kernels::Member::Lightning};

// One member's case and random inputs; g and beta are empty where the member has none.
struct FamilyData {
  FamilyCase c;
  Vec q, k, v, g, beta, state;
};

// Each row of dk floats scaled to length `scale`.
inline Vec unit_rows(Vec x, int dk, double scale) {
  for (size_t r = 0; r < x.size() / dk; ++r) {
    double ss = 0;
    for (int i = 0; i < dk; ++i) ss += double(x[r * dk + i]) * x[r * dk + i];
    for (int i = 0; i < dk; ++i) x[r * dk + i] = float(x[r * dk + i] * scale / std::sqrt(ss));
  }
  return x;
}

// Layer-like inputs: unit keys (queries unit · dk^-½), log decays in (−0.5, −0.01), β in (0, 1),
// a state of scale 0.3; drawn from rng in the order q, k, v, g, beta, state.
inline FamilyData family_data(kernels::Member m, const kernels::FamilyDims& d, std::mt19937& rng) {
  const kernels::FamilySpec spec = kernels::member_spec(m);
  FamilyData f;
  f.c = {spec.decay == kernels::Decay::None     ? 0
         : spec.decay == kernels::Decay::Scalar ? 1
                                                : 2,
         spec.delta,
         d.T,
         d.Hk,
         d.Hv,
         d.dk,
         d.dv};
  f.q = unit_rows(randn(size_t(d.T) * d.Hk * d.dk, rng), d.dk, 1.0 / std::sqrt(double(d.dk)));
  f.k = unit_rows(randn(size_t(d.T) * d.Hk * d.dk, rng), d.dk, 1.0);
  f.v = randn(size_t(d.T) * d.Hv * d.dv, rng);
  if (f.c.decay == 1) f.g = uniform(size_t(d.T) * d.Hv, rng, -0.5f, -0.01f);
  if (f.c.decay == 2) f.g = uniform(size_t(d.T) * d.Hv * d.dk, rng, -0.5f, -0.01f);
  if (spec.delta) f.beta = uniform(size_t(d.T) * d.Hv, rng, 0.0f, 1.0f);
  f.state = randn(size_t(d.Hv) * d.dk * d.dv, rng, 0.3f);
  return f;
}

// The transition in the member's natural structure (what the kernels write: [Hv] scalar,
// [Hv, dk] diagonal, [Hv, dk, dk] dense), taken from family()'s dense one.
inline Vec natural_transition(const FamilyCase& c, const Vec& dense) {
  const size_t dd = size_t(c.dk) * c.dk;
  Vec out;
  for (int h = 0; h < c.Hv; ++h) {
    if (c.delta)
      out.insert(out.end(), dense.begin() + dd * h, dense.begin() + dd * (h + 1));
    else if (c.decay == 2)
      for (int i = 0; i < c.dk; ++i) out.push_back(dense[dd * h + size_t(i) * c.dk + i]);
    else
      out.push_back(dense[dd * h]);
  }
  return out;
}

// ---- causal conv1d with SiLU (MATH.md §3): u = state ++ x ----
inline void conv1d(const Vec& x, const Vec& w, Vec& state, Vec* y, int T, int C, int K) {
  const int P = K - 1;
  std::vector<double> u(size_t(P + T) * C);
  for (size_t i = 0; i < size_t(P) * C; ++i) u[i] = state[i];
  for (size_t i = 0; i < size_t(T) * C; ++i) u[size_t(P) * C + i] = x[i];
  if (y != nullptr) {
    y->assign(size_t(T) * C, 0.0f);
    for (int t = 0; t < T; ++t)
      for (int ch = 0; ch < C; ++ch) {
        double s = 0;
        for (int j = 0; j < K; ++j) s += w[size_t(ch) * K + j] * u[size_t(t + j) * C + ch];
        (*y)[size_t(t) * C + ch] = float(silu(s));
      }
  }
  for (int r = 0; r < P; ++r)
    for (int ch = 0; ch < C; ++ch) state[size_t(r) * C + ch] = float(u[size_t(T + r) * C + ch]);
}

// ---- norms (MATH.md §7) ----
inline double inv_rms(const float* x, int cols, double eps) {
  double ss = 0;
  for (int c = 0; c < cols; ++c) ss += double(x[c]) * x[c];
  return 1.0 / std::sqrt(ss / cols + eps);
}
inline Vec rms_norm_zc(const Vec& x, const Vec& w, int rows, int cols, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    const double s = inv_rms(&x[size_t(r) * cols], cols, eps);
    for (int c = 0; c < cols; ++c)
      y[size_t(r) * cols + c] = float(x[size_t(r) * cols + c] * s * (1.0 + w[c]));
  }
  return y;
}
inline Vec rms_norm(const Vec& x, const Vec& w, int rows, int cols, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    const double s = inv_rms(&x[size_t(r) * cols], cols, eps);
    for (int c = 0; c < cols; ++c)
      y[size_t(r) * cols + c] = float(x[size_t(r) * cols + c] * s * w[c]);
  }
  return y;
}
inline Vec gated_rms_norm(const Vec& x, const Vec& z, const Vec& w, int rows, int cols,
                          double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    const double s = inv_rms(&x[size_t(r) * cols], cols, eps);
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      y[i] = float(w[c] * x[i] * s * silu(z[i]));
    }
  }
  return y;
}
inline Vec l2_normalize(const Vec& x, int rows, int cols, double eps, double scale) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int c = 0; c < cols; ++c) ss += double(x[size_t(r) * cols + c]) * x[size_t(r) * cols + c];
    const double s = scale / std::sqrt(ss + eps);
    for (int c = 0; c < cols; ++c) y[size_t(r) * cols + c] = float(x[size_t(r) * cols + c] * s);
  }
  return y;
}

// ---- rotary embeddings (MATH.md §4): pair i rotates by pos · θ^(−2i/rot) ----
// Rotates the vector x[0 … rot) (stride 1) at position pos; pairs (i, i + rot/2), or (2i, 2i+1)
// when interleaved.
inline void rotate(float* x, int rot, double theta, bool interleaved, double pos, int stride = 1) {
  for (int i = 0; i < rot / 2; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / rot);
    const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + rot / 2;
    const double a = x[ia * stride], b = x[ib * stride];
    x[ia * stride] = float(a * std::cos(angle) - b * std::sin(angle));
    x[ib * stride] = float(b * std::cos(angle) + a * std::sin(angle));
  }
}

// ---- attention: causal softmax with grouped K/V heads ----
// Query t at positions[t] when given (it sees keys 0 … positions[t]), else at n_kv − T + t.
inline Vec attention(const Vec& q, const Vec& k, const Vec& v, int T, int n_kv, int H, int Hkv,
                     int hd, double scale, const std::vector<int>* positions = nullptr) {
  Vec out(size_t(T) * H * hd, 0.0f);
  const int group = H / Hkv;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const int visible = (positions ? (*positions)[size_t(t)] : n_kv - T + t) + 1, hk = h / group;
      std::vector<double> s(visible);
      double mx = -1e300;
      for (int j = 0; j < visible; ++j) {
        double d = 0;
        for (int c = 0; c < hd; ++c)
          d += double(q[(size_t(t) * H + h) * hd + c]) * k[(size_t(j) * Hkv + hk) * hd + c];
        s[j] = scale * d;
        mx = std::max(mx, s[j]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int c = 0; c < hd; ++c) {
        double o = 0;
        for (int j = 0; j < visible; ++j) o += s[j] / z * v[(size_t(j) * Hkv + hk) * hd + c];
        out[(size_t(t) * H + h) * hd + c] = float(o);
      }
    }
  return out;
}

// ---- MoE routing: softmax, top k by probability (ties: lower index), optional renorm ----
inline void moe_route(const Vec& logits, int T, int E, int k, bool norm, std::vector<int>& ex,
                      Vec& wt) {
  ex.assign(size_t(T) * k, 0);
  wt.assign(size_t(T) * k, 0.0f);
  for (int t = 0; t < T; ++t) {
    std::vector<double> p(E);
    double mx = -1e300, z = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, double(logits[size_t(t) * E + e]));
    for (int e = 0; e < E; ++e) z += (p[e] = std::exp(logits[size_t(t) * E + e] - mx));
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += p[order[j]] / z;
    for (int j = 0; j < k; ++j) {
      ex[size_t(t) * k + j] = order[j];
      wt[size_t(t) * k + j] = float(p[order[j]] / z / (norm ? sum : 1.0));
    }
  }
}

// ---- MoE routing, sigmoid scoring (DeepSeek-V3 style), written from the definition: ----
// p = sigmoid(logit), choice = p + bias; keep the topk_group groups of E/n_group experts whose
// two best choices sum highest; the k best choices among them; weights p, renormalised
// (Σ + 1e-20) when norm, times scale. Sorting (stable) instead of the kernels' scans.
inline void moe_route_sigmoid(const Vec& logits, const Vec& bias, int T, int E, int k, int n_group,
                              int topk_group, bool norm, double scale, std::vector<int>& ex,
                              Vec& wt) {
  ex.assign(size_t(T) * k, 0);
  wt.assign(size_t(T) * k, 0.0f);
  const int per = E / n_group;
  for (int t = 0; t < T; ++t) {
    std::vector<double> p(E), choice(E);
    for (int e = 0; e < E; ++e) {
      p[e] = 1.0 / (1.0 + std::exp(-double(logits[size_t(t) * E + e])));
      choice[e] = p[e] + (bias.empty() ? 0.0 : double(bias[e]));
    }
    std::vector<double> gscore(n_group);
    for (int g = 0; g < n_group; ++g) {
      std::vector<double> c(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(c.begin(), c.end(), std::greater<double>());
      gscore[g] = n_group > 1 ? c[0] + c[1] : 0.0;
    }
    std::vector<int> groups(n_group);
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return gscore[a] > gscore[b]; });
    std::vector<int> allowed;
    for (int e = 0; e < E; ++e)
      if (std::find(groups.begin(), groups.begin() + topk_group, e / per) !=
          groups.begin() + topk_group)
        allowed.push_back(e);
    std::stable_sort(allowed.begin(), allowed.end(),
                     [&](int a, int b) { return choice[a] > choice[b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += p[allowed[j]];
    for (int j = 0; j < k; ++j) {
      ex[size_t(t) * k + j] = allowed[j];
      wt[size_t(t) * k + j] = float(p[allowed[j]] / (norm ? sum + 1e-20 : 1.0) * scale);
    }
  }
}

// The message of the std::invalid_argument a kernel call throws (the family's argument
// checks), or "(accepted)" when it throws none.
template <typename F>
std::string refusal(F&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace hypic::ref
