#pragma once
// The chunked linear-attention family (linear_family.hpp) as batched matrix products plus a few
// element-wise and scan steps: the one orchestration the CUDA backend runs on tensor cores
// (kernels/cuda/family.cu: strided-batched cuBLAS products, bf16 operands, f32 accumulation)
// and the host runs with sgemm (kernels/host/family_plan.cpp), written once and compiled by
// both compilers, so the CPU tests run the step sequence the GPU runs. The per-head chunk
// engine of kernels/host/linear_family.cpp stays the host backend's path and, with the token
// recurrence, the reference this plan is tested against (docs/linear-family.md derives the
// chunk form; docs/gpu.md describes this plan).
//
// Layout. C tokens per chunk, N = ⌈T / C⌉ chunks, P = N·C padded tokens, per value head h:
// rows [h, P, d] (token t of chunk c = t / C). The padding tokens have q = k = v = 0, log decay
// 0 and β = 0, so they add nothing to the state, the transition or the real tokens' outputs
// (their corrected values are 0: row t of (I + A)⁻¹ diag(β) is scaled by β_t). A product over
// all chunks and heads is one batch of B = Hv·N items with uniform strides; a product of the
// chunk-by-chunk scan is one batch of Hv items.
//
// Steps, with b_t the cumulative log decay inside the chunk (per key channel for diagonal
// decay), D_L = e^{b_last}:
//   1. Decay (scan): b, D_L per chunk.                            2. Rows: q, k raw and
//      q⊙e^{b_t}, k⊙e^{b_t}, k⊙e^{b_last − b_t}; Values: v.
//   3. Intra-chunk weights KK = (k_t·k_s e^{b_t − b_s})_{s<t}, QK = (q_t·k_s e^{b_t − b_s})_{s≤t}:
//      scalar/no decay one product each over B (raw rows) then a masking step; per-channel
//      decay one element step (factors e^{b_t − b_s} ≤ 1 per channel: not a plain product).
//   4. Delta rule: Solve (I + A)⁻¹ with A = diag(β) KK strict lower (row by row, in place), then
//      Mb = (I + A)⁻¹ diag(β); products U₀ = Mb V and W = Mb K_d over B.
//   5. Scan over chunks c: S_c saved (product type), S ← D_L S; delta: U_c = U₀ − W S_c, rounded;
//      S += K_tᵀ U_c (non-delta U = V). Dense transition: T ← D_L T − K_tᵀ (W T).
//   6. Outputs over B: O = Q_d S_c + QK U, then unpacked to [T, Hv, dv].
// Every product's operands are of the product type P (bf16 on tensor cores; f32 on the host
// and with HYPIC_CUDA_GEMM=f32); outputs that accumulate (U, S, T, O) or feed element steps
// (KK, QK) are f32. The host can round its P-typed stores to bf16 (Ctx::round) to emulate the
// tensor-core path's numerics.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "hypic/kernels/linear_family.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#define HYPIC_FAM_HD __host__ __device__
#else
#define HYPIC_FAM_HD
#endif

namespace hypic::kernels::family_plan {

// Tiny decays become exact zeros, as in the host engine (subnormals slow every later product).
constexpr float kFlushBelow = 1e-30f;
HYPIC_FAM_HD inline float ftz(float x) {
  return fabsf(x) < kFlushBelow ? 0.0f : x;
}
HYPIC_FAM_HD inline float fexp(float x) {
  return ftz(expf(x));
}
// x rounded to bf16 (nearest, ties to even), kept as a float; inputs are finite.
HYPIC_FAM_HD inline float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, sizeof u);
  return x;
}

// The buffers of a call. P-typed: product operands; F: f32.
enum Buf : int {
  BC,   // F  [Hv, P, w] cumulative log decay in the chunk (w = dk diagonal, 1 scalar)
  EL,   // F  [Hv, N, dk] e^{b_last} per chunk and key channel
  QR,   // P  [Hv, P, dk] raw queries (scalar/no decay, with outputs)
  KR,   // P  [Hv, P, dk] raw keys (scalar/no decay)
  QD,   // P  [Hv, P, dk] q ⊙ e^{b_t}
  KD,   // P  [Hv, P, dk] k ⊙ e^{b_t} (delta)
  KT,   // P  [Hv, P, dk] k ⊙ e^{b_last − b_t}
  VB,   // P  [Hv, P, dv] values
  KK,   // F  [B, C, C] strict-lower k·k weights, then (I + A)⁻¹ in place (delta)
  QK,   // F  [B, C, C] q·k products before masking (scalar/no decay, outputs)
  QKB,  // P  [B, C, C] masked q·k weights
  MB,   // P  [B, C, C] (I + A)⁻¹ diag(β)
  ROW,  // F  [B, C] the solve's row being formed
  U,    // F  [Hv, P, dv] corrected values (delta)
  UB,   // P  [Hv, P, dv] corrected values, product type (delta)
  WK,   // P  [Hv, P, dk] Mb K_d (delta)
  SB,   // P  [Hv, N, dk, dv] state before each chunk
  O,    // F  [Hv, P, dv] outputs, padded
  TB,   // P  [Hv, dk, dk] transition so far, product type (dense)
  WT,   // P  [Hv, C, dk] W T (dense)
  QL,   // P  [Hv, P, dk] per-channel decay: q ⊙ e^{b_t − b_ref} of t's sub-block (outputs)
  KL,   // P  [Hv, P, dk] per-channel decay: k ⊙ e^{b_t − b_ref} of t's sub-block (delta)
  KRS,  // P  [B, nsub, C, dk] per-channel decay: for sub-block i, k_s ⊙ e^{b_ref(i) − b_s}, s
        //    before it
  kBufs,
  STATE,  // F  the caller's state [Hv, dk, dv]
  TRANS,  // F  the caller's transition [Hv, dk, dk] (dense)
};

HYPIC_FAM_HD inline bool product_typed(int b) {
  return b == QR || b == KR || b == QD || b == KD || b == KT || b == VB || b == QKB || b == MB ||
         b == UB || b == WK || b == SB || b == TB || b == WT || b == QL || b == KL || b == KRS;
}

// Per-channel decay: the intra-chunk weights Σ_c a_tc k_sc e^{b_tc − b_sc} of tokens in
// different sub-blocks of kSub tokens are products with a reference point per sub-block i,
// b_ref(i) = b of the token before it: (a_t ⊙ e^{b_t − b_ref}) · (k_s ⊙ e^{b_ref − b_s}), every
// factor ≤ 1 (b falls along the chunk), so nothing overflows. Pairs inside one sub-block are an
// element step.
constexpr int kSub = 16;

// What a call computes, and its padded shape.
struct Plan {
  FamilySpec s;
  int T = 0, Hk = 1, Hv = 1, dk = 1, dv = 1;
  int C = 1, N = 0;
  bool out = false, trans = false, lowrank = false;
  HYPIC_FAM_HD int64_t P() const { return int64_t(N) * C; }
  HYPIC_FAM_HD int64_t B() const { return int64_t(Hv) * N; }
  HYPIC_FAM_HD bool diag() const { return s.decay == Decay::Diagonal; }
  HYPIC_FAM_HD bool dense() const { return trans && s.delta; }
  HYPIC_FAM_HD int nsub() const { return (C + kSub - 1) / kSub; }
  // Per-channel decay with intra-chunk weights from sub-block products.
  HYPIC_FAM_HD bool sub() const { return diag() && nsub() > 1 && (s.delta || out); }
};

// chunk: family_chunked's chunk (clamped to [1, T]); lowrank: the whole segment as one chunk.
inline Plan make_plan(const FamilySpec& s, const FamilyDims& d, bool out, bool trans, int chunk,
                      bool lowrank) {
  Plan p;
  p.s = s;
  p.T = d.T;
  p.Hk = d.Hk;
  p.Hv = d.Hv;
  p.dk = d.dk;
  p.dv = d.dv;
  p.C = lowrank ? (d.T > 0 ? d.T : 1) : (chunk < d.T ? chunk : (d.T > 0 ? d.T : 1));
  if (p.C < 1) p.C = 1;
  p.N = static_cast<int>((int64_t(d.T) + p.C - 1) / p.C);
  p.out = out;
  p.trans = trans;
  p.lowrank = lowrank;
  return p;
}

// Elements of each buffer (0: not used by this call).
inline int64_t elems(const Plan& p, int b) {
  const int64_t Hv = p.Hv, P = p.P(), B = p.B(), C = p.C, dk = p.dk, dv = p.dv;
  const bool delta = p.s.delta, scal = p.s.decay != Decay::Diagonal;
  switch (b) {
    case BC:
      return p.s.decay == Decay::None ? 0 : Hv * P * (p.diag() ? dk : 1);
    case EL:
      return Hv * p.N * dk;
    case QR:
      return scal && p.out ? Hv * P * dk : 0;
    case KR:
      return scal && (p.out || delta) ? Hv * P * dk : 0;
    case QD:
      return p.out ? Hv * P * dk : 0;
    case KD:
    case WK:
      return delta ? Hv * P * dk : 0;
    case KT:
      return Hv * P * dk;
    case VB:
      return Hv * P * dv;
    case KK:
    case MB:
      return delta ? B * C * C : 0;
    case QK:
      return (scal || p.sub()) && p.out ? B * C * C : 0;
    case QL:
      return p.sub() && p.out ? Hv * P * dk : 0;
    case KL:
      return p.sub() && delta ? Hv * P * dk : 0;
    case KRS:
      return p.sub() ? B * p.nsub() * C * dk : 0;
    case QKB:
      return p.out ? B * C * C : 0;
    case ROW:
      return delta ? B * C : 0;
    case U:
    case UB:
      return delta ? Hv * P * dv : 0;
    case SB:
      return p.out || delta ? B * dk * dv : 0;
    case O:
      return p.out ? Hv * P * dv : 0;
    case TB:
      return p.dense() ? Hv * dk * dk : 0;
    case WT:
      return p.dense() ? Hv * C * dk : 0;
    default:
      return 0;
  }
}

// Byte offsets of the buffers in one scratch allocation (each 256-byte aligned) for a product
// type of `psize` bytes; offsets[kBufs] is the total.
inline void layout(const Plan& p, int psize, int64_t* offsets) {
  int64_t at = 0;
  for (int b = 0; b < kBufs; ++b) {
    offsets[b] = at;
    const int64_t bytes = elems(p, b) * (product_typed(b) ? psize : 4);
    at += (bytes + 255) / 256 * 256;
  }
  offsets[kBufs] = at;
}

// The pointers one call's steps work on.
template <class P>
struct Ctx {
  Plan p;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  float *state = nullptr, *out = nullptr, *trans = nullptr;
  float *lr_d = nullptr, *lr_x = nullptr, *lr_y = nullptr;
  float* f[kBufs] = {};  // F-typed buffers
  P* b[kBufs] = {};      // P-typed buffers
  bool round = false;    // host only: round P-typed stores to bf16 (tensor-core emulation)
};

template <class P>
Ctx<P> make_ctx(const Plan& p, const FamilyInputs& in, float* state, float* out, float* trans,
                void* scratch, const int64_t* offsets) {
  Ctx<P> x;
  x.p = p;
  x.q = in.q;
  x.k = in.k;
  x.v = in.v;
  x.g = in.g;
  x.beta = in.beta;
  x.state = state;
  x.out = out;
  x.trans = trans;
  for (int b = 0; b < kBufs; ++b) {
    if (elems(p, b) == 0) continue;
    char* at = static_cast<char*>(scratch) + offsets[b];
    if (product_typed(b))
      x.b[b] = reinterpret_cast<P*>(at);
    else
      x.f[b] = reinterpret_cast<float*>(at);
  }
  return x;
}

HYPIC_FAM_HD inline void put(float* at, float v, bool round) {
  *at = round ? round_bf16(v) : v;
}
HYPIC_FAM_HD inline float get(const float* at) {
  return *at;
}
#if defined(__CUDACC__)
__device__ inline void put(__nv_bfloat16* at, float v, bool) {
  *at = __float2bfloat16_rn(v);
}
__device__ inline float get(const __nv_bfloat16* at) {
  return __bfloat162float(*at);
}
#endif

// Inputs with the padding: token t ≥ T reads 0.
template <class P>
HYPIC_FAM_HD float q_in(const Ctx<P>& x, int h, int64_t t, int c) {
  if (t >= x.p.T) return 0.0f;
  const int hk = h / (x.p.Hv / x.p.Hk);
  return x.q[(t * x.p.Hk + hk) * x.p.dk + c];
}
template <class P>
HYPIC_FAM_HD float k_in(const Ctx<P>& x, int h, int64_t t, int c) {
  if (t >= x.p.T) return 0.0f;
  const int hk = h / (x.p.Hv / x.p.Hk);
  return x.k[(t * x.p.Hk + hk) * x.p.dk + c];
}
template <class P>
HYPIC_FAM_HD float g_in(const Ctx<P>& x, int h, int64_t t, int c) {
  if (t >= x.p.T) return 0.0f;
  return x.p.diag() ? x.g[(t * x.p.Hv + h) * x.p.dk + c] : x.g[t * x.p.Hv + h];
}
template <class P>
HYPIC_FAM_HD float beta_in(const Ctx<P>& x, int h, int64_t t) {
  return t >= x.p.T ? 0.0f : x.beta[t * x.p.Hv + h];
}
// b_t of padded token t (head h) in channel c.
template <class P>
HYPIC_FAM_HD float bcum(const Ctx<P>& x, int h, int64_t t, int c) {
  if (x.p.s.decay == Decay::None) return 0.0f;
  const int64_t row = int64_t(h) * x.p.P() + t;
  return x.p.diag() ? x.f[BC][row * x.p.dk + c] : x.f[BC][row];
}

// The element-wise and scan steps (Solve: the row-by-row substitution, items are blocks).
enum class Step {
  Decay,        // per (h, chunk[, channel]): the scan of b and e^{b_last}
  Rows,         // per (h, t, channel): QR, KR, QD, KD, KT
  Values,       // per (h, t, j): VB
  MaskScalar,   // per (batch item, r, s): KK masked and scaled in place, QKB from QK
  SubRows,      // per (h, t, channel): QL, KL
  SubRight,     // per (batch item, sub-block, s, channel): KRS
  IntraDiag,    // per (batch item, r, s): KK and QKB with per-channel decay factors (pairs in
                // different sub-blocks: from the sub-block products)
  Solve,        // per batch item: (I + A)⁻¹ in place of KK, row by row (see solve_entry)
  SolveScale,   // per (batch item, r, s): MB = (I + A)⁻¹ diag(β)
  StateStep,    // chunk c, per (h, i, j): SB[h, c] = S, then S ← e^{b_last} S
  RoundU,       // chunk c, per (h, r, j): UB = U
  TransInit,    // the transition ← identity (low-rank: its diagonal ← 1, for T = 0)
  TransStep,    // chunk c, per (h, i, j): T ← ftz(T), TB = T, T ← e^{b_last} T (dense)
  TransFinish,  // T ← ftz(T) (dense)
  TransDecay,   // scalar / diagonal T = Π_c e^{b_last}
  Unpack,       // out[t, h, j] = O[h, t, j]
  LowRank,      // tdiag, X = K_t, Y = W (one chunk)
};

template <class P>
int64_t items(const Ctx<P>& x, Step s) {  // host only: launch sizes
  const Plan& p = x.p;
  const int64_t Hv = p.Hv, dk = p.dk, dv = p.dv, C = p.C;
  switch (s) {
    case Step::Decay:
      return p.s.decay == Decay::Scalar ? Hv * p.N : Hv * p.N * dk;
    case Step::Rows:
    case Step::SubRows:
      return Hv * p.P() * dk;
    case Step::SubRight:
      return p.B() * p.nsub() * C * dk;
    case Step::Values:
      return Hv * p.P() * dv;
    case Step::MaskScalar:
    case Step::IntraDiag:
    case Step::SolveScale:
      return p.B() * C * C;
    case Step::Solve:
      return p.B();
    case Step::StateStep:
      return Hv * dk * dv;
    case Step::RoundU:
      return Hv * C * dv;
    case Step::TransInit:
      return p.lowrank ? Hv * dk : Hv * transition_floats_per_head(natural_structure(p.s), p.dk);
    case Step::TransStep:
    case Step::TransFinish:
      return Hv * dk * dk;
    case Step::TransDecay:
      return Hv * (p.diag() ? dk : 1);
    case Step::Unpack:
      return int64_t(p.T) * Hv * dv;
    case Step::LowRank:
      return Hv * int64_t(p.T) * dk;
  }
  return 0;
}

// Entry (r, col) of row r of (I + A)⁻¹ for batch item bi, A[r, j] = β_r KK[r, j] (j < r), with
// the rows j < r of KK already replaced by those of the inverse (forward substitution):
//   M[r, col] = [r = col] − β_r Σ_{col ≤ j < r} KK[r, j] M[j, col];   0 for col > r.
template <class P>
HYPIC_FAM_HD float solve_entry(const Ctx<P>& x, int64_t bi, int r, int col) {
  if (col > r) return 0.0f;
  if (col == r) return 1.0f;
  const int64_t C = x.p.C;
  const float* m = x.f[KK] + bi * C * C;
  float acc = 0.0f;
  for (int j = col; j < r; ++j) acc += m[r * C + j] * m[j * C + col];
  const int h = static_cast<int>(bi / x.p.N), c = static_cast<int>(bi % x.p.N);
  return -beta_in(x, h, int64_t(c) * C + r) * acc;
}

// One item of an element-wise step (chunk: the scan's chunk for the per-chunk steps).
template <class P>
HYPIC_FAM_HD void step_item(const Ctx<P>& x, Step s, int chunk, int64_t i) {
  const Plan& p = x.p;
  const int dk = p.dk, dv = p.dv, C = p.C, N = p.N;
  const int64_t P_ = p.P();
  switch (s) {
    case Step::Decay: {
      if (p.s.decay == Decay::None) {
        x.f[EL][i] = 1.0f;
        return;
      }
      const bool diag = p.diag();
      const int ch = diag ? static_cast<int>(i % dk) : 0;
      const int64_t hc = diag ? i / dk : i;
      const int h = static_cast<int>(hc / N), c = static_cast<int>(hc % N);
      float acc = 0.0f;
      for (int r = 0; r < C; ++r) {
        const int64_t t = int64_t(c) * C + r;
        acc += g_in(x, h, t, ch);
        x.f[BC][(int64_t(h) * P_ + t) * (diag ? dk : 1) + ch] = acc;
      }
      const float e = fexp(acc);
      if (diag)
        x.f[EL][hc * dk + ch] = e;
      else
        for (int cc = 0; cc < dk; ++cc) x.f[EL][hc * dk + cc] = e;
      return;
    }
    case Step::Rows: {
      const int ch = static_cast<int>(i % dk);
      const int64_t ht = i / dk, t = ht % P_;
      const int h = static_cast<int>(ht / P_);
      const int64_t last = t / C * C + C - 1;
      const float qv = q_in(x, h, t, ch), kv = k_in(x, h, t, ch);
      float e = 1.0f, r = 1.0f;
      if (p.s.decay != Decay::None) {
        const float bt = bcum(x, h, t, ch), bl = bcum(x, h, last, ch);
        e = fexp(bt);
        r = fexp(bl - bt);
      }
      if (x.b[QR] != nullptr) put(x.b[QR] + i, qv, x.round);
      if (x.b[KR] != nullptr) put(x.b[KR] + i, kv, x.round);
      if (x.b[QD] != nullptr) put(x.b[QD] + i, qv * e, x.round);
      if (x.b[KD] != nullptr) put(x.b[KD] + i, kv * e, x.round);
      put(x.b[KT] + i, kv * r, x.round);
      return;
    }
    case Step::SubRows: {
      const int ch = static_cast<int>(i % dk);
      const int64_t ht = i / dk, t = ht % P_;
      const int h = static_cast<int>(ht / P_);
      const int r = static_cast<int>(t % C), blk = r / kSub;
      const float f = blk > 0 ? fexp(bcum(x, h, t, ch) - bcum(x, h, t - r + blk * kSub - 1, ch))
                              : 0.0f;  // sub-block 0 has nothing before it
      if (x.b[QL] != nullptr) put(x.b[QL] + i, q_in(x, h, t, ch) * f, x.round);
      if (x.b[KL] != nullptr) put(x.b[KL] + i, k_in(x, h, t, ch) * f, x.round);
      return;
    }
    case Step::SubRight: {
      const int ch = static_cast<int>(i % dk);
      int64_t rest = i / dk;
      const int sr = static_cast<int>(rest % C);
      rest /= C;
      const int blk = static_cast<int>(rest % p.nsub());
      const int64_t bi = rest / p.nsub();
      const int h = static_cast<int>(bi / N);
      const int64_t t0 = bi % N * C;
      float v = 0.0f;
      if (blk > 0 && sr < blk * kSub)
        v = k_in(x, h, t0 + sr, ch) *
            fexp(bcum(x, h, t0 + blk * kSub - 1, ch) - bcum(x, h, t0 + sr, ch));
      put(x.b[KRS] + i, v, x.round);
      return;
    }
    case Step::Values: {
      const int j = static_cast<int>(i % dv);
      const int64_t ht = i / dv, t = ht % P_;
      const int h = static_cast<int>(ht / P_);
      put(x.b[VB] + i, t < p.T ? x.v[(t * p.Hv + h) * dv + j] : 0.0f, x.round);
      return;
    }
    case Step::MaskScalar:
    case Step::IntraDiag:
    case Step::SolveScale: {
      const int64_t CC = int64_t(C) * C, bi = i / CC;
      const int r = static_cast<int>(i / C % C), col = static_cast<int>(i % C);
      const int h = static_cast<int>(bi / N);
      const int64_t t0 = bi % N * C;
      if (s == Step::SolveScale) {
        put(x.b[MB] + i, col <= r ? x.f[KK][i] * beta_in(x, h, t0 + col) : 0.0f, x.round);
        return;
      }
      if (s == Step::MaskScalar) {
        const float f = p.s.decay == Decay::Scalar && col <= r
                            ? fexp(bcum(x, h, t0 + r, 0) - bcum(x, h, t0 + col, 0))
                            : 1.0f;
        if (x.f[KK] != nullptr) x.f[KK][i] = col < r ? x.f[KK][i] * f : 0.0f;
        if (x.b[QKB] != nullptr) put(x.b[QKB] + i, col <= r ? x.f[QK][i] * f : 0.0f, x.round);
        return;
      }
      float kk = 0.0f, qk = 0.0f;
      if (p.sub() && col / kSub < r / kSub) {  // from the sub-block products
        if (x.f[KK] != nullptr) kk = x.f[KK][i];
        if (x.f[QK] != nullptr) qk = x.f[QK][i];
      } else if (col <= r) {
        for (int c = 0; c < dk; ++c) {
          const float f = fexp(bcum(x, h, t0 + r, c) - bcum(x, h, t0 + col, c));
          const float ks = k_in(x, h, t0 + col, c) * f;
          kk += k_in(x, h, t0 + r, c) * ks;
          qk += q_in(x, h, t0 + r, c) * ks;
        }
      }
      if (x.f[KK] != nullptr) x.f[KK][i] = col < r ? kk : 0.0f;
      if (x.b[QKB] != nullptr) put(x.b[QKB] + i, qk, x.round);
      return;
    }
    case Step::Solve:
      return;  // not element-wise: run_solve
    case Step::StateStep: {
      const int64_t dd = int64_t(dk) * dv, h = i / dd, rest = i % dd;
      const int ch = static_cast<int>(rest / dv);
      if (x.b[SB] != nullptr) put(x.b[SB] + (h * N + chunk) * dd + rest, x.state[i], x.round);
      if (p.s.decay != Decay::None) x.state[i] *= x.f[EL][(h * N + chunk) * dk + ch];
      return;
    }
    case Step::RoundU: {
      const int64_t per = int64_t(C) * dv, h = i / per;
      const int64_t at = (h * P_ + int64_t(chunk) * C) * dv + i % per;
      put(x.b[UB] + at, x.f[U][at], x.round);
      return;
    }
    case Step::TransInit: {
      if (p.lowrank)
        x.lr_d[i] = 1.0f;
      else if (p.s.delta)
        x.trans[i] = (i / dk) % dk == i % dk ? 1.0f : 0.0f;
      else
        x.trans[i] = 1.0f;
      return;
    }
    case Step::TransStep: {
      const int64_t dd = int64_t(dk) * dk, h = i / dd;
      const int row = static_cast<int>(i % dd / dk);
      const float v = ftz(x.trans[i]);
      put(x.b[TB] + i, v, x.round);
      x.trans[i] = v * x.f[EL][(h * N + chunk) * dk + row];
      return;
    }
    case Step::TransFinish:
      x.trans[i] = ftz(x.trans[i]);
      return;
    case Step::TransDecay: {
      const int w = p.diag() ? dk : 1;
      const int64_t h = i / w;
      const int ch = static_cast<int>(i % w);
      float acc = 1.0f;
      for (int c = 0; c < N; ++c) acc = ftz(acc * x.f[EL][(h * N + c) * dk + ch]);
      x.trans[i] = acc;
      return;
    }
    case Step::Unpack: {
      const int j = static_cast<int>(i % dv);
      const int64_t th = i / dv, h = th % p.Hv, t = th / p.Hv;
      x.out[i] = x.f[O][(h * P_ + t) * dv + j];
      return;
    }
    case Step::LowRank: {
      const int ch = static_cast<int>(i % dk);
      const int64_t ht = i / dk, h = ht / p.T, t = ht % p.T;
      const int64_t at = (h * P_ + t) * dk + ch;
      x.lr_x[i] = get(x.b[KT] + at);
      x.lr_y[i] = get(x.b[WK] + at);
      if (t == 0) x.lr_d[h * dk + ch] = x.f[EL][h * N * dk + ch];
      return;
    }
  }
}

// A batch of row-major products C_i = α·op(A_i)·op(B_i) + β·C_i, i < batch; each operand is
// (buffer, offset, leading dimension, stride between items), in elements.
struct Mat {
  int buf;
  int64_t offset;
  int ld;
  int64_t stride;
};

// The step sequence. X provides step(Step, chunk) (Solve included) and
// gemm(trans_a, trans_b, m, n, k, alpha, Mat a, Mat b, beta, Mat c, batch).
template <class X>
void run(X& x, const Plan& p) {
  if (p.T == 0) {  // the identity transition (low-rank: its diagonal) and nothing else
    if (p.trans || p.lowrank) x.step(Step::TransInit, 0);
    return;
  }
  const int C = p.C, N = p.N, dk = p.dk, dv = p.dv, Hv = p.Hv;
  const int B = static_cast<int>(p.B());
  const int64_t P = p.P(), CC = int64_t(C) * C, dd = int64_t(dk) * dv;
  const bool delta = p.s.delta, diag = p.diag();
  x.step(Step::Decay, 0);
  x.step(Step::Rows, 0);
  x.step(Step::Values, 0);
  // Intra-chunk weights.
  if (diag) {
    if (p.sub()) {  // pairs across sub-blocks: one product per sub-block i ≥ 1 and weight
      x.step(Step::SubRows, 0);
      x.step(Step::SubRight, 0);
      const int ns = p.nsub();
      for (int i = 1; i < ns; ++i) {
        const int r0 = i * kSub, rows = C - r0 < kSub ? C - r0 : kSub;
        const Mat right{KRS, int64_t(i) * C * dk, dk, int64_t(ns) * C * dk};
        if (delta)
          x.gemm(false, true, rows, r0, dk, 1.0f, Mat{KL, int64_t(r0) * dk, dk, int64_t(C) * dk},
                 right, 0.0f, Mat{KK, int64_t(r0) * C, C, CC}, B);
        if (p.out)
          x.gemm(false, true, rows, r0, dk, 1.0f, Mat{QL, int64_t(r0) * dk, dk, int64_t(C) * dk},
                 right, 0.0f, Mat{QK, int64_t(r0) * C, C, CC}, B);
      }
    }
    if (delta || p.out) x.step(Step::IntraDiag, 0);
  } else if (delta || p.out) {
    const Mat kr{KR, 0, dk, int64_t(C) * dk};
    if (delta) x.gemm(false, true, C, C, dk, 1.0f, kr, kr, 0.0f, Mat{KK, 0, C, CC}, B);
    if (p.out)
      x.gemm(false, true, C, C, dk, 1.0f, Mat{QR, 0, dk, int64_t(C) * dk}, kr, 0.0f,
             Mat{QK, 0, C, CC}, B);
    x.step(Step::MaskScalar, 0);
  }
  // The WY form of the delta rule, every chunk at once.
  if (delta) {
    x.step(Step::Solve, 0);
    x.step(Step::SolveScale, 0);
    const Mat mb{MB, 0, C, CC};
    x.gemm(false, false, C, dv, C, 1.0f, mb, Mat{VB, 0, dv, int64_t(C) * dv}, 0.0f,
           Mat{U, 0, dv, int64_t(C) * dv}, B);
    x.gemm(false, false, C, dk, C, 1.0f, mb, Mat{KD, 0, dk, int64_t(C) * dk}, 0.0f,
           Mat{WK, 0, dk, int64_t(C) * dk}, B);
  }
  if (p.trans) x.step(Step::TransInit, 0);
  // The scan over chunks: state (and dense transition) carried from chunk to chunk.
  const int vals = delta ? UB : VB;
  for (int c = 0; c < N; ++c) {
    const int64_t rk = int64_t(c) * C * dk, rv = int64_t(c) * C * dv;
    const Mat kt{KT, rk, dk, P * dk};
    x.step(Step::StateStep, c);
    if (delta) {
      x.gemm(false, false, C, dv, dk, -1.0f, Mat{WK, rk, dk, P * dk},
             Mat{SB, int64_t(c) * dd, dv, int64_t(N) * dd}, 1.0f, Mat{U, rv, dv, P * dv}, Hv);
      x.step(Step::RoundU, c);
    }
    x.gemm(true, false, dk, dv, C, 1.0f, kt, Mat{vals, rv, dv, P * dv}, 1.0f, Mat{STATE, 0, dv, dd},
           Hv);
    if (p.dense()) {
      const int64_t kk = int64_t(dk) * dk;
      x.step(Step::TransStep, c);
      x.gemm(false, false, C, dk, dk, 1.0f, Mat{WK, rk, dk, P * dk}, Mat{TB, 0, dk, kk}, 0.0f,
             Mat{WT, 0, dk, int64_t(C) * dk}, Hv);
      x.gemm(true, false, dk, dk, C, -1.0f, kt, Mat{WT, 0, dk, int64_t(C) * dk}, 1.0f,
             Mat{TRANS, 0, dk, kk}, Hv);
    }
  }
  if (p.dense()) x.step(Step::TransFinish, 0);
  if (p.trans && !delta) x.step(Step::TransDecay, 0);
  // Outputs of every chunk: the state before it, then the chunk's own tokens.
  if (p.out) {
    const Mat o{O, 0, dv, int64_t(C) * dv};
    x.gemm(false, false, C, dv, dk, 1.0f, Mat{QD, 0, dk, int64_t(C) * dk}, Mat{SB, 0, dv, dd}, 0.0f,
           o, B);
    x.gemm(false, false, C, dv, C, 1.0f, Mat{QKB, 0, C, CC}, Mat{vals, 0, dv, int64_t(C) * dv},
           1.0f, o, B);
    x.step(Step::Unpack, 0);
  }
  if (p.lowrank) x.step(Step::LowRank, 0);
}

// The FLOPs of a call: its products (on tensor cores where the device runs them there) and
// the element-wise and scan steps, counted by walking the plan.
struct Flops {
  double products = 0, steps = 0;
};
inline Flops flops(const Plan& p) {
  struct Count {
    Ctx<float> x;
    Flops f;
    void gemm(bool, bool, int m, int n, int k, float, Mat, Mat, float, Mat, int batch) {
      f.products += 2.0 * m * n * k * batch;
    }
    void step(Step s, int) {
      const double n = static_cast<double>(items(x, s)), C = x.p.C, dk = x.p.dk;
      switch (s) {
        case Step::Decay:
          f.steps += 2.0 * n * (x.p.s.decay == Decay::None ? 0 : C);
          break;
        case Step::Rows:
          f.steps += 6.0 * n;
          break;
        case Step::IntraDiag: {  // the lower triangle, or of the diagonal sub-blocks only
          const double w = (x.p.s.delta ? 1 : 0) + (x.p.out ? 1 : 0);
          const double width = x.p.sub() ? kSub : C;
          f.steps += 5.0 * dk * w * n / C * (width + 1) / 2;
          break;
        }
        case Step::SubRows:
        case Step::SubRight:
          f.steps += 3.0 * n;
          break;
        case Step::Solve:
          f.steps += n * C * C * C / 3;
          break;
        case Step::MaskScalar:
        case Step::SolveScale:
        case Step::StateStep:
        case Step::TransStep:
          f.steps += n;
          break;
        default:
          break;
      }
    }
  } count;
  count.x.p = p;
  run(count, p);
  return count.f;
}

// The host's run of this plan (kernels/host/family_plan.cpp), same contract as family_chunked
// / family_chunked_lowrank. bf16_products: every product operand rounded to bf16 as the CUDA
// backend stores them on tensor cores (an emulation of its numerics; f32 otherwise).
void family_chunked_planned(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* transition, int chunk,
                            bool bf16_products = false);
void family_chunked_lowrank_planned(const FamilySpec& s, const FamilyDims& d,
                                    const FamilyInputs& in, float* state, float* out, float* tdiag,
                                    float* x, float* y, bool bf16_products = false);

}  // namespace hypic::kernels::family_plan
