// Host implementation of the linear-attention family (kernels/include/.../linear_family.hpp).
// One chunk engine serves every member; the derivation of the chunk form is in
// docs/linear-family.md. Value heads are independent, so they run in parallel (parallel.hpp),
// each on one thread with its products on that thread; each head owns a slice of one scratch
// buffer allocated per call.
#include "hypic/kernels/linear_family.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/family_checks.hpp"
#include "parallel.hpp"

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#define HYPIC_HAVE_MXCSR 1
#endif

namespace hypic::kernels {
namespace {
// Decay factors and transitions shrink geometrically; below this they are zeroed, because
// subnormal floats make every later product (and the BLAS) many times slower. A factor this
// small is far below float resolution next to the O(1) values it is added to.
constexpr float kFlushBelow = 1e-30f;
inline float ftz(float x) {
  return std::fabs(x) < kFlushBelow ? 0.0f : x;
}
inline float fexp(float x) {
  return ftz(std::exp(x));
}

// Products of small decays still produce subnormals inside the BLAS; flush them to zero in this
// thread for the duration of one head (its products run on the same thread).
class FlushSubnormals {
 public:
#if defined(HYPIC_HAVE_MXCSR)
  FlushSubnormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | 0x8040u);
  }  // FTZ | DAZ
  ~FlushSubnormals() {
    _mm_setcsr(saved_);
  }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned saved_;
#endif
};

// Row pointers of one value head into the [T, H, d] inputs.
struct HeadIO {
  const float* q = nullptr;
  const float* k = nullptr;
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  const float* g = nullptr;  // scalar: g[t * ldg]; diagonal: g + t * ldg
  int ldg = 0;
  const float* beta = nullptr;
  int ldb = 0;
  float* out = nullptr;
  int ldo = 0;
};

HeadIO head_io(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* out,
               int h) {
  const int hk = h / (d.Hv / d.Hk);
  HeadIO io;
  io.q = in.q + static_cast<size_t>(hk) * d.dk;
  io.k = in.k + static_cast<size_t>(hk) * d.dk;
  io.ldk = d.Hk * d.dk;
  io.v = in.v + static_cast<size_t>(h) * d.dv;
  io.ldv = d.Hv * d.dv;
  if (s.decay == Decay::Scalar) {
    io.g = in.g + h;
    io.ldg = d.Hv;
  } else if (s.decay == Decay::Diagonal) {
    io.g = in.g + static_cast<size_t>(h) * d.dk;
    io.ldg = d.Hv * d.dk;
  }
  if (s.delta) {
    io.beta = in.beta + h;
    io.ldb = d.Hv;
  }
  if (out != nullptr) {
    io.out = out + static_cast<size_t>(h) * d.dv;
    io.ldo = d.Hv * d.dv;
  }
  return io;
}

// Per-head work space for chunks of up to L tokens.
struct Scratch {
  float* bcum;  // cumulative log decay inside the chunk [L, dk] (scalar: [L])
  float* el;    // e^{b_L} per key channel [dk]
  float* ed;    // diagonal decay: e^{g_t} per token and channel [L, dk]
  float* hv;    // diagonal decay: one key carried forward through the decays [dk]
  float* qd;    // q_t ⊙ e^{b_t} [L, dk]
  float* kd;    // k_t ⊙ e^{b_t} [L, dk]
  float* kt;    // k_t ⊙ e^{b_L − b_t} [L, dk]
  float* qk;    // masked intra-chunk q·k weights [L, L]
  float* kk;    // masked intra-chunk k·k weights [L, L]
  float* minv;  // (I + A)^{-1}, then scaled by β on the columns [L, L]
  float* u;     // corrected values u_t [L, dv]
  float* wk;    // (I + A)^{-1} diag(β) K_d [L, dk]
  float* wt;    // wk · T_prev [L, dk]

  static size_t floats(int L, int dk, int dv) {
    return static_cast<size_t>(L) * dk * 7 + 2 * dk + static_cast<size_t>(L) * L * 3 +
           static_cast<size_t>(L) * dv;
  }
  static Scratch carve(float* p, int L, int dk, int dv) {
    Scratch w{};
    const size_t Ld = static_cast<size_t>(L) * dk, LL = static_cast<size_t>(L) * L;
    w.bcum = p, p += Ld;
    w.el = p, p += dk;
    w.ed = p, p += Ld;
    w.hv = p, p += dk;
    w.qd = p, p += Ld;
    w.kd = p, p += Ld;
    w.kt = p, p += Ld;
    w.wk = p, p += Ld;
    w.wt = p, p += Ld;
    w.qk = p, p += LL;
    w.kk = p, p += LL;
    w.minv = p, p += LL;
    w.u = p;
    return w;
  }
};

// Low-rank export of a single-chunk segment.
struct LowRankOut {
  float* tdiag = nullptr;  // [dk]
  float* x = nullptr;      // [L, dk]
  float* y = nullptr;      // [L, dk]
};

// Σ x_i y_i with independent partial sums, so that the compiler vectorises it without
// reassociation flags.
inline float dot(const float* x, const float* y, int n) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] += x[i + l] * y[i + l];
  float acc = 0.0f;
  for (; i < n; ++i) acc += x[i] * y[i];
  for (int l = 0; l < kLanes; ++l) acc += part[l];
  return acc;
}

// Intra-chunk weights W[t, s] = Σ_c a_tc b_sc e^{b_tc − b_sc} for s ≤ t (s < t when strict),
// zero elsewhere. Scalar/no decay: one gemm then a per-pair factor. Diagonal: each key b_s is
// carried forward through the per-token factors e^{g_t} (h ← h ⊙ e^{g_t}), so the O(L²·dk)
// pair weights cost multiplies, not exponentials, and every factor stays ≤ 1.
void intra_weights(const FamilySpec& s, int L, int dk, const float* a, int lda, const float* b,
                   int ldb, const float* bcum, const float* ed, float* h, bool strict, float* w) {
  if (s.decay != Decay::Diagonal) {
    gemm(false, true, L, L, dk, 1.0f, a, lda, b, ldb, 0.0f, w, L);
    for (int t = 0; t < L; ++t) {
      float* row = w + static_cast<size_t>(t) * L;
      const int last = strict ? t : t + 1;
      if (s.decay == Decay::Scalar)
        for (int j = 0; j < last; ++j) row[j] *= fexp(bcum[t] - bcum[j]);
      for (int j = last; j < L; ++j) row[j] = 0.0f;
    }
    return;
  }
  std::fill(w, w + static_cast<size_t>(L) * L, 0.0f);
  for (int j = 0; j < L; ++j) {
    std::memcpy(h, b + static_cast<size_t>(j) * ldb, sizeof(float) * dk);
    for (int t = j; t < L; ++t) {
      if (t > j) {
        const float* e = ed + static_cast<size_t>(t) * dk;
        for (int c = 0; c < dk; ++c) h[c] *= e[c];
      }
      if (strict && t == j) continue;
      w[static_cast<size_t>(t) * L + j] = dot(a + static_cast<size_t>(t) * lda, h, dk);
    }
  }
}

// One value head over all tokens. S: [dk, dv] in/out. trans: the natural-structure transition
// of this head (or null). lr: low-rank export (requires T ≤ chunk).
void run_head(const FamilySpec& s, int T, int dk, int dv, const HeadIO& io, float* S, float* trans,
              int chunk, const Scratch& w, const LowRankOut* lr) {
  const FlushSubnormals guard;
  const TStructure st = natural_structure(s);
  if (trans != nullptr) {  // identity before the first token
    if (st == TStructure::Dense) {
      std::fill(trans, trans + static_cast<size_t>(dk) * dk, 0.0f);
      for (int c = 0; c < dk; ++c) trans[static_cast<size_t>(c) * dk + c] = 1.0f;
    } else {
      std::fill(trans, trans + (st == TStructure::Scalar ? 1 : dk), 1.0f);
    }
  }
  if (lr != nullptr) std::fill(lr->tdiag, lr->tdiag + dk, 1.0f);
  const bool diag = s.decay == Decay::Diagonal;

  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int L = std::min(chunk, T - t0);
    const float* q = io.q + static_cast<size_t>(t0) * io.ldk;
    const float* k = io.k + static_cast<size_t>(t0) * io.ldk;
    const float* v = io.v + static_cast<size_t>(t0) * io.ldv;

    // 1. Cumulative log decay inside the chunk and its total e^{b_L}.
    if (s.decay == Decay::Scalar) {
      float c = 0.0f;
      for (int i = 0; i < L; ++i) w.bcum[i] = (c += io.g[static_cast<size_t>(t0 + i) * io.ldg]);
      std::fill(w.el, w.el + dk, fexp(w.bcum[L - 1]));
    } else if (diag) {
      for (int i = 0; i < L; ++i) {
        const float* gi = io.g + static_cast<size_t>(t0 + i) * io.ldg;
        float* bi = w.bcum + static_cast<size_t>(i) * dk;
        const float* prev = i > 0 ? bi - dk : nullptr;
        float* ei = w.ed + static_cast<size_t>(i) * dk;
        for (int c = 0; c < dk; ++c) bi[c] = (prev ? prev[c] : 0.0f) + gi[c];
        for (int c = 0; c < dk; ++c) ei[c] = fexp(gi[c]);
      }
      const float* bl = w.bcum + static_cast<size_t>(L - 1) * dk;
      for (int c = 0; c < dk; ++c) w.el[c] = fexp(bl[c]);
    } else {
      std::fill(w.el, w.el + dk, 1.0f);
    }

    // 2. Decay-scaled copies: q_t e^{b_t}, k_t e^{b_t}, k_t e^{b_L − b_t} (all factors ≤ 1).
    for (int i = 0; i < L; ++i) {
      const float* qi = q + static_cast<size_t>(i) * io.ldk;
      const float* ki = k + static_cast<size_t>(i) * io.ldk;
      float* qd = w.qd + static_cast<size_t>(i) * dk;
      float* kd = w.kd + static_cast<size_t>(i) * dk;
      float* kt = w.kt + static_cast<size_t>(i) * dk;
      if (s.decay == Decay::None) {
        std::memcpy(qd, qi, sizeof(float) * dk);
        std::memcpy(kd, ki, sizeof(float) * dk);
        std::memcpy(kt, ki, sizeof(float) * dk);
      } else if (s.decay == Decay::Scalar) {
        const float e = fexp(w.bcum[i]), r = fexp(w.bcum[L - 1] - w.bcum[i]);
        for (int c = 0; c < dk; ++c) qd[c] = qi[c] * e, kd[c] = ki[c] * e, kt[c] = ki[c] * r;
      } else {
        const float* bi = w.bcum + static_cast<size_t>(i) * dk;
        const float* bl = w.bcum + static_cast<size_t>(L - 1) * dk;
        for (int c = 0; c < dk; ++c) {
          qd[c] = qi[c] * fexp(bi[c]);
          kd[c] = ki[c] * fexp(bi[c]);
          kt[c] = ki[c] * fexp(bl[c] - bi[c]);
        }
      }
    }

    // 3. Corrected values U. Delta rule: (I + A) U = diag(β) V − diag(β) K_d S with
    //    A[t,s] = β_t k_t·k_s e^{b_t − b_s} (s < t), so U = Mb V − (Mb K_d) S, Mb = (I+A)^{-1}
    //    diag(β).
    if (s.delta) {
      intra_weights(s, L, dk, k, io.ldk, k, io.ldk, w.bcum, w.ed, w.hv, true, w.kk);
      const float* beta = io.beta + static_cast<size_t>(t0) * io.ldb;
      for (int t = 0; t < L; ++t) {
        float* row = w.minv + static_cast<size_t>(t) * L;
        std::fill(row, row + L, 0.0f);
        row[t] = 1.0f;
        const float bt = beta[static_cast<size_t>(t) * io.ldb];
        const float* kkt = w.kk + static_cast<size_t>(t) * L;
        for (int j = 0; j < t; ++j) {
          const float a = bt * kkt[j];
          const float* rj = w.minv + static_cast<size_t>(j) * L;
          for (int i = 0; i <= j; ++i) row[i] -= a * rj[i];
        }
      }
      for (int t = 0; t < L; ++t) {
        float* row = w.minv + static_cast<size_t>(t) * L;
        for (int j = 0; j <= t; ++j) row[j] *= beta[static_cast<size_t>(j) * io.ldb];
      }
      gemm(false, false, L, dv, L, 1.0f, w.minv, L, v, io.ldv, 0.0f, w.u, dv);
      gemm(false, false, L, dk, L, 1.0f, w.minv, L, w.kd, dk, 0.0f, w.wk, dk);
      gemm(false, false, L, dv, dk, -1.0f, w.wk, dk, S, dv, 1.0f, w.u, dv);
    } else {
      for (int i = 0; i < L; ++i)
        std::memcpy(w.u + static_cast<size_t>(i) * dv, v + static_cast<size_t>(i) * io.ldv,
                    sizeof(float) * dv);
    }

    // 4. Outputs: o_t = (q_t e^{b_t})ᵀ S + Σ_{s≤t} (q_t·k_s e^{b_t − b_s}) u_s.
    if (io.out != nullptr) {
      float* o = io.out + static_cast<size_t>(t0) * io.ldo;
      intra_weights(s, L, dk, q, io.ldk, k, io.ldk, w.bcum, w.ed, w.hv, false, w.qk);
      gemm(false, false, L, dv, dk, 1.0f, w.qd, dk, S, dv, 0.0f, o, io.ldo);
      gemm(false, false, L, dv, L, 1.0f, w.qk, L, w.u, dv, 1.0f, o, io.ldo);
    }

    // 5. Transition of the tokens so far. Delta: T_chunk = diag(e^{b_L}) − K_tᵀ W_k.
    if (lr != nullptr) {  // single chunk: export the factors as they are
      std::memcpy(lr->tdiag, w.el, sizeof(float) * dk);
      std::memcpy(lr->x, w.kt, sizeof(float) * L * dk);
      std::memcpy(lr->y, w.wk, sizeof(float) * L * dk);
    }
    if (trans != nullptr) {
      if (st == TStructure::Dense) {
        if (t0 == 0) {
          for (int c = 0; c < dk; ++c) trans[static_cast<size_t>(c) * dk + c] = w.el[c];
          gemm(true, false, dk, dk, L, -1.0f, w.kt, dk, w.wk, dk, 1.0f, trans, dk);
        } else {
          gemm(false, false, L, dk, dk, 1.0f, w.wk, dk, trans, dk, 0.0f, w.wt, dk);
          for (int c = 0; c < dk; ++c) {
            float* row = trans + static_cast<size_t>(c) * dk;
            for (int j = 0; j < dk; ++j) row[j] *= w.el[c];
          }
          gemm(true, false, dk, dk, L, -1.0f, w.kt, dk, w.wt, dk, 1.0f, trans, dk);
        }
        for (size_t i = 0; i < static_cast<size_t>(dk) * dk; ++i) trans[i] = ftz(trans[i]);
      } else if (st == TStructure::Scalar) {
        trans[0] = ftz(trans[0] * w.el[0]);
      } else {
        for (int c = 0; c < dk; ++c) trans[c] = ftz(trans[c] * w.el[c]);
      }
    }

    // 6. State: S ← diag(e^{b_L}) S + K_tᵀ U.
    if (s.decay != Decay::None)
      for (int c = 0; c < dk; ++c) {
        float* row = S + static_cast<size_t>(c) * dv;
        for (int j = 0; j < dv; ++j) row[j] *= w.el[c];
      }
    gemm(true, false, dk, dv, L, 1.0f, w.kt, dk, w.u, dv, 1.0f, S, dv);
  }
}

void rotate_pair(float& a, float& b, double c, double sn) {
  const double x = a, y = b;
  a = static_cast<float>(x * c - y * sn);
  b = static_cast<float>(x * sn + y * c);
}

// cos and sin of pos · θ^(−2i/rotary_dim) for each pair i, in double.
void rotary_angles(const Rotary& r, int64_t pos, std::vector<double>& c, std::vector<double>& sn) {
  const int half = r.rotary_dim / 2;
  c.resize(half);
  sn.resize(half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(static_cast<double>(r.theta), -2.0 * i / r.rotary_dim);
    const double angle = static_cast<double>(pos) * inv_freq;
    c[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

}  // namespace

FamilySpec member_spec(Member m) {
  switch (m) {
    case Member::LinearAttention:
      return {Decay::None, false};
    case Member::RetNet:
      return {Decay::Scalar, false};
    case Member::Mamba2:
      return {Decay::Scalar, false};
    case Member::GLA:
      return {Decay::Diagonal, false};
    case Member::DeltaNet:
      return {Decay::None, true};
    case Member::GatedDeltaNet:
      return {Decay::Scalar, true};
    case Member::KDA:
      return {Decay::Diagonal, true};
    case Member::Lightning:
      return {Decay::Scalar, false};
  }
  return {};
}

const char* member_name(Member m) {
  switch (m) {
    case Member::LinearAttention:
      return "linear-attention";
    case Member::RetNet:
      return "retnet";
    case Member::Mamba2:
      return "mamba2";
    case Member::GLA:
      return "gla";
    case Member::DeltaNet:
      return "deltanet";
    case Member::GatedDeltaNet:
      return "gated-deltanet";
    case Member::KDA:
      return "kda";
    case Member::Lightning:
      return "lightning";
  }
  return "?";
}

TStructure natural_structure(const FamilySpec& s) {
  if (s.delta) return TStructure::Dense;
  return s.decay == Decay::Diagonal ? TStructure::Diagonal : TStructure::Scalar;
}

int64_t transition_floats_per_head(TStructure st, int dk, int rank) {
  switch (st) {
    case TStructure::Scalar:
      return 1;
    case TStructure::Diagonal:
      return dk;
    case TStructure::Dense:
      return static_cast<int64_t>(dk) * dk;
    case TStructure::LowRank:
      return dk + 2 * static_cast<int64_t>(rank) * dk;
  }
  return 0;
}

void family_recurrent(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                      float* state, float* out) {
  check_family_inputs(s, d, in);
  const int T = d.T, dk = d.dk, dv = d.dv;
  const int64_t work = int64_t(T) * dk * dv;
  host::parallel_for(d.Hv, work, [=](const int64_t h) {
    const HeadIO io = head_io(s, d, in, out, static_cast<int>(h));
    float* Sf = state + static_cast<size_t>(h) * dk * dv;
    std::vector<double> S(Sf, Sf + static_cast<size_t>(dk) * dv), u(dv);
    for (int t = 0; t < T; ++t) {
      const float* q = io.q + static_cast<size_t>(t) * io.ldk;
      const float* k = io.k + static_cast<size_t>(t) * io.ldk;
      const float* v = io.v + static_cast<size_t>(t) * io.ldv;
      if (s.decay != Decay::None) {
        const float* g = io.g + static_cast<size_t>(t) * io.ldg;
        for (int c = 0; c < dk; ++c) {
          const double f = std::exp(static_cast<double>(s.decay == Decay::Scalar ? g[0] : g[c]));
          for (int j = 0; j < dv; ++j) S[static_cast<size_t>(c) * dv + j] *= f;
        }
      }
      // u = β (v − Sᵀk) for the delta rule (the erase), plain v otherwise.
      const double b = s.delta ? io.beta[static_cast<size_t>(t) * io.ldb] : 1.0;
      for (int j = 0; j < dv; ++j) u[j] = v[j];
      if (s.delta)
        for (int c = 0; c < dk; ++c)
          for (int j = 0; j < dv; ++j) u[j] -= k[c] * S[static_cast<size_t>(c) * dv + j];
      for (int c = 0; c < dk; ++c)
        for (int j = 0; j < dv; ++j) S[static_cast<size_t>(c) * dv + j] += k[c] * b * u[j];
      if (io.out != nullptr) {
        float* o = io.out + static_cast<size_t>(t) * io.ldo;
        for (int j = 0; j < dv; ++j) {
          double acc = 0.0;
          for (int c = 0; c < dk; ++c) acc += q[c] * S[static_cast<size_t>(c) * dv + j];
          o[j] = static_cast<float>(acc);
        }
      }
    }
    for (size_t i = 0; i < S.size(); ++i) Sf[i] = static_cast<float>(S[i]);
  });
}

void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                          float* state, float* out) {
  check_family_inputs(s, d, in);
  const int T = d.T, dk = d.dk, dv = d.dv;
  std::vector<float> scratch(static_cast<size_t>(d.Hv) * 2 * dv);
  float* base = scratch.data();
  const int64_t work = int64_t(T) * dk * dv;
  host::parallel_for(d.Hv, work, [=](const int64_t h) {
    const FlushSubnormals guard;
    const HeadIO io = head_io(s, d, in, out, static_cast<int>(h));
    float* S = state + static_cast<size_t>(h) * dk * dv;
    float* u = base + static_cast<size_t>(h) * 2 * dv;
    float* o = u + dv;
    for (int t = 0; t < T; ++t) {
      const float* q = io.q + static_cast<size_t>(t) * io.ldk;
      const float* k = io.k + static_cast<size_t>(t) * io.ldk;
      const float* v = io.v + static_cast<size_t>(t) * io.ldv;
      const float* g = s.decay == Decay::None ? nullptr : io.g + static_cast<size_t>(t) * io.ldg;
      const float e0 = s.decay == Decay::Scalar ? std::exp(g[0]) : 1.0f;
      auto decay = [&](int c) { return s.decay == Decay::Diagonal ? std::exp(g[c]) : e0; };
      // Pass 1 (delta rule): u = β (v − (D S)ᵀ k).
      const float b = s.delta ? io.beta[static_cast<size_t>(t) * io.ldb] : 1.0f;
      for (int j = 0; j < dv; ++j) u[j] = 0.0f;
      if (s.delta)
        for (int c = 0; c < dk; ++c) {
          const float kc = k[c] * decay(c);
          const float* row = S + static_cast<size_t>(c) * dv;
          for (int j = 0; j < dv; ++j) u[j] += kc * row[j];
        }
      for (int j = 0; j < dv; ++j) u[j] = b * (v[j] - u[j]);
      // Pass 2: S ← D S + k uᵀ, and o = Sᵀ q on the way.
      for (int j = 0; j < dv; ++j) o[j] = 0.0f;
      for (int c = 0; c < dk; ++c) {
        const float e = decay(c), kc = k[c], qc = q[c];
        float* row = S + static_cast<size_t>(c) * dv;
        for (int j = 0; j < dv; ++j) {
          row[j] = e * row[j] + kc * u[j];
          o[j] += qc * row[j];
        }
      }
      if (io.out != nullptr)
        std::memcpy(io.out + static_cast<size_t>(t) * io.ldo, o, sizeof(float) * dv);
    }
  });
}

void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                    float* out, float* transition, int chunk) {
  check_family_inputs(s, d, in);
  if (chunk <= 0) throw std::invalid_argument("family_chunked: chunk must be positive");
  const int L = std::max(1, std::min(chunk, d.T));
  const size_t per_head = Scratch::floats(L, d.dk, d.dv);
  // Every scratch element is written before it is read: no need to zero it.
  std::unique_ptr<float[]> scratch(new float[per_head * d.Hv]);
  float* base = scratch.get();
  const int64_t tstride = transition_floats_per_head(natural_structure(s), d.dk);
  const int T = d.T, dk = d.dk, dv = d.dv;
  const int64_t work = int64_t(T) * dk * (dk + dv);
  host::parallel_for(d.Hv, work, [=](const int64_t h) {
    const Scratch w = Scratch::carve(base + per_head * h, L, dk, dv);
    float* tr = transition != nullptr ? transition + tstride * h : nullptr;
    run_head(s, T, dk, dv, head_io(s, d, in, out, static_cast<int>(h)),
             state + static_cast<size_t>(h) * dk * dv, tr, L, w, nullptr);
  });
}

void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* tdiag, float* x, float* y) {
  check_family_inputs(s, d, in);
  if (!s.delta) throw std::invalid_argument("family_chunked_lowrank: only for delta members");
  const int L = std::max(1, d.T);
  const size_t per_head = Scratch::floats(L, d.dk, d.dv);
  // Every scratch element is written before it is read: no need to zero it.
  std::unique_ptr<float[]> scratch(new float[per_head * d.Hv]);
  float* base = scratch.get();
  const int T = d.T, dk = d.dk, dv = d.dv;
  const int64_t work = int64_t(T) * dk * (dk + dv);
  host::parallel_for(d.Hv, work, [=](const int64_t h) {
    const Scratch w = Scratch::carve(base + per_head * h, L, dk, dv);
    const size_t xy = static_cast<size_t>(h) * T * dk;
    const LowRankOut lr{tdiag + static_cast<size_t>(h) * dk, x + xy, y + xy};
    run_head(s, T, dk, dv, head_io(s, d, in, out, static_cast<int>(h)),
             state + static_cast<size_t>(h) * dk * dv, nullptr, L, w, &lr);
  });
}

void rotary_rotate(const Rotary& r, float* x, int n, int ld, int dk, int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rotary_rotate: rotary_dim must be even and <= dk");
  const int half = r.rotary_dim / 2;
  std::vector<double> c, sn;
  rotary_angles(r, pos, c, sn);
  const bool inter = r.interleaved;
  host::parallel_for(n, 4 * half, [&](int64_t row) {
    float* xr = x + static_cast<size_t>(row) * ld;
    for (int i = 0; i < half; ++i) {
      const int a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + half;
      rotate_pair(xr[a], xr[b], c[i], sn[i]);
    }
  });
}

void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols, int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rotary_rotate_columns: rotary_dim must be even and <= dk");
  const int half = r.rotary_dim / 2;
  std::vector<double> c, sn;
  rotary_angles(r, pos, c, sn);
  const bool inter = r.interleaved;
  host::parallel_for(half, 4 * int64_t(cols), [&](int64_t i) {
    const int a = inter ? 2 * int(i) : int(i), b = inter ? 2 * int(i) + 1 : int(i) + half;
    float* ra = m + static_cast<size_t>(a) * cols;
    float* rb = m + static_cast<size_t>(b) * cols;
    for (int j = 0; j < cols; ++j) rotate_pair(ra[j], rb[j], c[i], sn[i]);
  });
}

void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                     int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rerotate_states: rotary_dim must be even and <= dk");
  const size_t per_head = static_cast<size_t>(dk) * dv;
  if (dst != src) std::memcpy(dst, src, per_head * heads * sizeof(float));
  const int half = r.rotary_dim / 2;
  std::vector<double> c, sn;
  rotary_angles(r, pos, c, sn);
  const bool inter = r.interleaved;
  // One item per (head, pair): the same rotation of each element as rotary_rotate_columns.
  host::parallel_for(int64_t(heads) * half, 4 * int64_t(dv), [&](int64_t item) {
    const int h = int(item / half), i = int(item % half);
    const int a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + half;
    float* m = dst + per_head * h;
    float* ra = m + static_cast<size_t>(a) * dv;
    float* rb = m + static_cast<size_t>(b) * dv;
    for (int j = 0; j < dv; ++j) rotate_pair(ra[j], rb[j], c[i], sn[i]);
  });
}

}  // namespace hypic::kernels
