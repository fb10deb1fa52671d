// The linear-attention family on the device: the chunked WY form of kernels/host/
// linear_family.cpp (derivation: docs/linear-family.md), one thread block per value head
// walking its chunks in order. Every step of a chunk is a loop of the block's threads over the
// elements of a small matrix (products of at most chunk × max(dk, dv) × max(dk, dv) terms), with
// the chunk's working matrices in global scratch. Plain and close to the host code rather than
// fast: the transition T and the state S(·|0) come out of the same pass, as on the host.
#include <algorithm>
#include <stdexcept>

#include "hypic/kernels/device_book.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
constexpr float kFlushBelow = 1e-30f;  // as the host: tiny decays become exact zeros
constexpr int kFamilyThreads = 256;

__device__ float ftz(float x) {
  return fabsf(x) < kFlushBelow ? 0.0f : x;
}
__device__ float fexp(float x) {
  return ftz(expf(x));
}

// C[i, j] = alpha · Σ_p A(i, p) B(p, j) + beta · C[i, j] with A(i, p) = A[i·ars + p·acs] and
// B(p, j) = B[p·brs + j·bcs]; beta = 0 ignores what C held. Ends with a block barrier.
__device__ void block_mm(int m, int n, int k, float alpha, const float* A, int64_t ars, int64_t acs,
                         const float* B, int64_t brs, int64_t bcs, float beta, float* C,
                         int64_t ldc) {
  const int64_t mn = int64_t(m) * n;
  for (int64_t idx = threadIdx.x; idx < mn; idx += blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    float acc = 0.0f;
    for (int64_t p = 0; p < k; ++p) acc += A[i * ars + p * acs] * B[p * brs + j * bcs];
    float* c = C + i * ldc + j;
    *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
  }
  __syncthreads();
}

struct FamilyArgs {
  int decay;  // 0 none, 1 scalar, 2 diagonal
  bool delta;
  int T, Hk, Hv, dk, dv, L;
  const float *q, *k, *v, *g, *beta;
  float *state, *out, *trans;  // trans: natural structure per head, or null
  float *lr_d, *lr_x, *lr_y;   // low-rank export (single chunk), or null
  float* scratch;              // per head: scratch_per_head floats
  int64_t scratch_per_head;    // device_book::family_scratch_floats(L, dk, dv)
};

// W[t, j] = Σ_c a_tc b_jc e^{b_tc − b_jc} for j ≤ t (j < t when strict), zero elsewhere; a, b
// rows of the chunk with leading dimension ld.
__device__ void intra_weights(const FamilyArgs& A, int L, const float* a, const float* b,
                              int64_t ld, const float* bcum, bool strict, float* w) {
  const int dk = A.dk;
  const int64_t LL = int64_t(L) * L;
  for (int64_t idx = threadIdx.x; idx < LL; idx += blockDim.x) {
    const int64_t t = idx / L, j = idx % L;
    float acc = 0.0f;
    if (j < t || (!strict && j == t)) {
      const float* at = a + t * ld;
      const float* bj = b + j * ld;
      if (A.decay == 2) {
        const float* bt_ = bcum + t * dk;
        const float* bj_ = bcum + j * dk;
        for (int c = 0; c < dk; ++c) acc += at[c] * bj[c] * expf(bt_[c] - bj_[c]);
      } else {
        for (int c = 0; c < dk; ++c) acc += at[c] * bj[c];
        if (A.decay == 1) acc *= fexp(bcum[t] - bcum[j]);
      }
    }
    w[idx] = acc;
  }
  __syncthreads();
}

__global__ __launch_bounds__(kFamilyThreads) void family_chunked_kernel(FamilyArgs A) {
  const int h = blockIdx.x;
  const int hk = h / (A.Hv / A.Hk);
  const int dk = A.dk, dv = A.dv, T = A.T;
  const int64_t ldk = int64_t(A.Hk) * dk, ldv = int64_t(A.Hv) * dv;
  const int L_max = A.L;
  float* S = A.state + int64_t(h) * dk * dv;

  float* p = A.scratch + A.scratch_per_head * h;
  float* bcum = p;
  p += int64_t(L_max) * dk;
  float* el = p;
  p += dk;
  float* qd = p;
  p += int64_t(L_max) * dk;
  float* kd = p;
  p += int64_t(L_max) * dk;
  float* kt = p;
  p += int64_t(L_max) * dk;
  float* wk = p;
  p += int64_t(L_max) * dk;
  float* wt = p;
  p += int64_t(L_max) * dk;
  float* qk = p;
  p += int64_t(L_max) * L_max;
  float* kk = p;
  p += int64_t(L_max) * L_max;
  float* minv = p;
  p += int64_t(L_max) * L_max;
  float* u = p;

  // Transition per head in its natural structure: dense for delta members, else diagonal
  // (dk) or scalar (1). Identity before the first token.
  float* tr = nullptr;
  if (A.trans != nullptr) {
    const int64_t per = A.delta ? int64_t(dk) * dk : (A.decay == 2 ? dk : 1);
    tr = A.trans + per * h;
    for (int64_t i = threadIdx.x; i < per; i += blockDim.x)
      tr[i] = A.delta ? (i / dk == i % dk ? 1.0f : 0.0f) : 1.0f;
  }
  if (A.lr_d != nullptr)
    for (int c = threadIdx.x; c < dk; c += blockDim.x) A.lr_d[int64_t(h) * dk + c] = 1.0f;
  __syncthreads();

  for (int t0 = 0; t0 < T; t0 += L_max) {
    const int L = min(L_max, T - t0);
    const float* q = A.q + int64_t(t0) * ldk + int64_t(hk) * dk;
    const float* k = A.k + int64_t(t0) * ldk + int64_t(hk) * dk;
    const float* v = A.v + int64_t(t0) * ldv + int64_t(h) * dv;

    // 1. Cumulative log decay inside the chunk, and e^{b_L} per key channel.
    if (A.decay == 1) {
      if (threadIdx.x == 0) {
        float c = 0.0f;
        for (int i = 0; i < L; ++i) bcum[i] = (c += A.g[(int64_t(t0) + i) * A.Hv + h]);
      }
      __syncthreads();
      for (int c = threadIdx.x; c < dk; c += blockDim.x) el[c] = fexp(bcum[L - 1]);
    } else if (A.decay == 2) {
      for (int c = threadIdx.x; c < dk; c += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < L; ++i)
          bcum[int64_t(i) * dk + c] = (acc += A.g[((int64_t(t0) + i) * A.Hv + h) * dk + c]);
        el[c] = fexp(acc);
      }
    } else {
      for (int c = threadIdx.x; c < dk; c += blockDim.x) el[c] = 1.0f;
    }
    __syncthreads();

    // 2. q_t e^{b_t}, k_t e^{b_t}, k_t e^{b_L − b_t} (every factor ≤ 1).
    for (int64_t idx = threadIdx.x; idx < int64_t(L) * dk; idx += blockDim.x) {
      const int64_t i = idx / dk, c = idx % dk;
      const float qi = q[i * ldk + c], ki = k[i * ldk + c];
      float e = 1.0f, r = 1.0f;
      if (A.decay == 1) {
        e = fexp(bcum[i]);
        r = fexp(bcum[L - 1] - bcum[i]);
      } else if (A.decay == 2) {
        e = fexp(bcum[i * dk + c]);
        r = fexp(bcum[int64_t(L - 1) * dk + c] - bcum[i * dk + c]);
      }
      qd[idx] = qi * e;
      kd[idx] = ki * e;
      kt[idx] = ki * r;
    }
    __syncthreads();

    // 3. Corrected values U = Mb V − (Mb K_d) S with Mb = (I + A)^{-1} diag(β).
    if (A.delta) {
      const float* beta = A.beta + int64_t(t0) * A.Hv + h;
      intra_weights(A, L, k, k, ldk, bcum, true, kk);
      // Forward substitution, one row at a time: row t = e_t − β_t Σ_{j<t} kk[t, j] row j.
      for (int t = 0; t < L; ++t) {
        const float bt = beta[int64_t(t) * A.Hv];
        const float* kk_t = kk + int64_t(t) * L;
        for (int i = threadIdx.x; i < L; i += blockDim.x) {
          float r = i == t ? 1.0f : 0.0f;
          if (i < t)
            for (int j = i; j < t; ++j) r -= bt * kk_t[j] * minv[int64_t(j) * L + i];
          minv[int64_t(t) * L + i] = r;
        }
        __syncthreads();
      }
      for (int64_t idx = threadIdx.x; idx < int64_t(L) * L; idx += blockDim.x) {
        const int64_t j = idx % L;
        minv[idx] *= beta[int64_t(j) * A.Hv];
      }
      __syncthreads();
      block_mm(L, dv, L, 1.0f, minv, L, 1, v, ldv, 1, 0.0f, u, dv);
      block_mm(L, dk, L, 1.0f, minv, L, 1, kd, dk, 1, 0.0f, wk, dk);
      block_mm(L, dv, dk, -1.0f, wk, dk, 1, S, dv, 1, 1.0f, u, dv);
    } else {
      for (int64_t idx = threadIdx.x; idx < int64_t(L) * dv; idx += blockDim.x)
        u[idx] = v[(idx / dv) * ldv + idx % dv];
      __syncthreads();
    }

    // 4. o_t = (q_t e^{b_t})ᵀ S + Σ_{s≤t} (q_t·k_s e^{b_t − b_s}) u_s.
    if (A.out != nullptr) {
      float* o = A.out + int64_t(t0) * ldv + int64_t(h) * dv;
      intra_weights(A, L, q, k, ldk, bcum, false, qk);
      block_mm(L, dv, dk, 1.0f, qd, dk, 1, S, dv, 1, 0.0f, o, ldv);
      block_mm(L, dv, L, 1.0f, qk, L, 1, u, dv, 1, 1.0f, o, ldv);
    }

    // 5. Low-rank export (one chunk) and the transition of the tokens so far:
    //    dense T ← diag(e^{b_L}) T − K_tᵀ (W_k T); scalar / diagonal T ← e^{b_L} T.
    if (A.lr_d != nullptr) {
      for (int c = threadIdx.x; c < dk; c += blockDim.x) A.lr_d[int64_t(h) * dk + c] = el[c];
      for (int64_t idx = threadIdx.x; idx < int64_t(L) * dk; idx += blockDim.x) {
        A.lr_x[int64_t(h) * T * dk + idx] = kt[idx];
        A.lr_y[int64_t(h) * T * dk + idx] = wk[idx];
      }
    }
    if (tr != nullptr) {
      if (A.delta) {
        block_mm(L, dk, dk, 1.0f, wk, dk, 1, tr, dk, 1, 0.0f, wt, dk);
        for (int64_t idx = threadIdx.x; idx < int64_t(dk) * dk; idx += blockDim.x) {
          const int64_t c = idx / dk, j = idx % dk;
          float acc = 0.0f;
          for (int64_t i = 0; i < L; ++i) acc += kt[i * dk + c] * wt[i * dk + j];
          tr[idx] = ftz(el[c] * tr[idx] - acc);
        }
      } else if (A.decay == 2) {
        for (int c = threadIdx.x; c < dk; c += blockDim.x) tr[c] = ftz(tr[c] * el[c]);
      } else if (threadIdx.x == 0) {
        tr[0] = ftz(tr[0] * el[0]);
      }
    }

    // 6. S ← diag(e^{b_L}) S + K_tᵀ U (every read of S above is behind a barrier).
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < int64_t(dk) * dv; idx += blockDim.x) {
      const int64_t c = idx / dv, j = idx % dv;
      float acc = 0.0f;
      for (int64_t i = 0; i < L; ++i) acc += kt[i * dk + c] * u[i * dv + j];
      S[idx] = (A.decay != 0 ? el[c] * S[idx] : S[idx]) + acc;
    }
    __syncthreads();
  }
}

// Token-by-token f32 recurrence: a thread owns column j of S (all dk rows), so the two passes
// per token need no barrier.
__global__ void family_recurrent_kernel(FamilyArgs A) {
  const int h = blockIdx.x;
  const int hk = h / (A.Hv / A.Hk);
  const int dk = A.dk, dv = A.dv;
  const int64_t ldk = int64_t(A.Hk) * dk, ldv = int64_t(A.Hv) * dv;
  float* S = A.state + int64_t(h) * dk * dv;
  for (int j = threadIdx.x; j < dv; j += blockDim.x) {
    for (int t = 0; t < A.T; ++t) {
      const float* q = A.q + t * ldk + int64_t(hk) * dk;
      const float* k = A.k + t * ldk + int64_t(hk) * dk;
      const float vj = A.v[t * ldv + int64_t(h) * dv + j];
      const float* g = A.decay == 0   ? nullptr
                       : A.decay == 1 ? A.g + int64_t(t) * A.Hv + h
                                      : A.g + (int64_t(t) * A.Hv + h) * dk;
      const float e0 = A.decay == 1 ? expf(g[0]) : 1.0f;
      const float b = A.delta ? A.beta[int64_t(t) * A.Hv + h] : 1.0f;
      float uj = 0.0f;
      if (A.delta)
        for (int c = 0; c < dk; ++c)
          uj += k[c] * (A.decay == 2 ? expf(g[c]) : e0) * S[int64_t(c) * dv + j];
      uj = b * (vj - uj);
      float oj = 0.0f;
      for (int c = 0; c < dk; ++c) {
        const float e = A.decay == 2 ? expf(g[c]) : e0;
        float& s = S[int64_t(c) * dv + j];
        s = e * s + k[c] * uj;
        oj += q[c] * s;
      }
      if (A.out != nullptr) A.out[t * ldv + int64_t(h) * dv + j] = oj;
    }
  }
}

void check_inputs(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in) {
  if (d.T < 0 || d.Hk <= 0 || d.Hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.Hv % d.Hk != 0)
    throw std::invalid_argument("linear family: bad dims (Hv must be a multiple of Hk)");
  if (d.T > 0 && (in.q == nullptr || in.k == nullptr || in.v == nullptr))
    throw std::invalid_argument("linear family: q, k, v required");
  if (d.T > 0 && s.decay != Decay::None && in.g == nullptr)
    throw std::invalid_argument("linear family: decaying member needs g");
  if (d.T > 0 && s.delta && in.beta == nullptr)
    throw std::invalid_argument("linear family: delta member needs beta");
}

FamilyArgs make_args(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                     float* out) {
  FamilyArgs a{};
  a.decay = s.decay == Decay::None ? 0 : s.decay == Decay::Scalar ? 1 : 2;
  a.delta = s.delta;
  a.T = d.T;
  a.Hk = d.Hk;
  a.Hv = d.Hv;
  a.dk = d.dk;
  a.dv = d.dv;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  a.g = in.g;
  a.beta = in.beta;
  a.state = state;
  a.out = out;
  return a;
}

void run_chunked(FamilyArgs a, const char* what) {
  a.scratch_per_head = device_book::family_scratch_floats(a.L, a.dk, a.dv);
  Scratch scratch(sizeof(float) * size_t(a.scratch_per_head) * size_t(a.Hv));
  a.scratch = scratch.as<float>();
  family_chunked_kernel<<<a.Hv, kFamilyThreads>>>(a);
  check_launch(what);
}

}  // namespace

void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                    float* out, float* transition, int chunk) {
  check_inputs(s, d, in);
  if (chunk <= 0) throw std::invalid_argument("family_chunked: chunk must be positive");
  FamilyArgs a = make_args(s, d, in, state, out);
  a.L = std::max(1, std::min(chunk, d.T));
  a.trans = transition;
  run_chunked(a, "family_chunked");
}

void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* tdiag, float* x, float* y) {
  check_inputs(s, d, in);
  if (!s.delta) throw std::invalid_argument("family_chunked_lowrank: only for delta members");
  FamilyArgs a = make_args(s, d, in, state, out);
  a.L = std::max(1, d.T);  // the whole segment is one chunk
  a.lr_d = tdiag;
  a.lr_x = x;
  a.lr_y = y;
  run_chunked(a, "family_chunked_lowrank");
}

void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                          float* state, float* out) {
  check_inputs(s, d, in);
  if (d.T == 0) return;
  family_recurrent_kernel<<<d.Hv, 128>>>(make_args(s, d, in, state, out));
  check_launch("family_recurrent_f32");
}

}  // namespace hypic::kernels::cuda
