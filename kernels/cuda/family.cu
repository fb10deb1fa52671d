// The linear-attention family on the device. family_chunked and family_chunked_lowrank run the
// steps of family_plan.hpp (the orchestration the host runs too, kernels/host/family_plan.cpp):
// every product a strided-batched cuBLAS product over the heads (and, where no state is
// involved, over every chunk at once) with bf16 operands, f32 accumulation and f32 or bf16
// output on tensor cores (HYPIC_CUDA_GEMM=f32: the same products in f32), the element-wise and
// scan steps one generic kernel (a grid-stride loop over the step's items, each item the
// plan's own step_item), and the forward substitution one block per (head, chunk), its rows
// in order. The transition T and the state S(·|0) come out of the same pass. The token
// recurrence for decode (family_recurrent_f32) stays one block per value head.
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "hypic/kernels/family_checks.hpp"
#include "hypic/kernels/family_plan.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
namespace plan = family_plan;

struct FamilyArgs {
  int decay;  // 0 none, 1 scalar, 2 diagonal
  bool delta;
  int T, Hk, Hv, dk, dv;
  const float *q, *k, *v, *g, *beta;
  float *state, *out;
};

// One element-wise / scan step of the plan over its items.
template <class P>
__global__ void step_kernel(plan::Ctx<P> x, plan::Step s, int chunk, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
    plan::step_item(x, s, chunk, i);
}

// Forward substitution for batch item blockIdx.x: row r of (I + A)⁻¹ formed in ROW from the
// rows above it, then written over row r of KK (every read of row r is behind the barrier).
template <class P>
__global__ void solve_kernel(plan::Ctx<P> x) {
  const int64_t bi = blockIdx.x;
  const int C = x.p.C;
  float* m = x.f[plan::KK] + bi * int64_t(C) * C;
  float* row = x.f[plan::ROW] + bi * C;
  for (int r = 0; r < C; ++r) {
    for (int col = threadIdx.x; col <= r; col += blockDim.x)
      row[col] = plan::solve_entry(x, bi, r, col);
    __syncthreads();
    for (int col = threadIdx.x; col <= r; col += blockDim.x) m[int64_t(r) * C + col] = row[col];
    __syncthreads();
  }
}

// The plan's executor: P = __nv_bfloat16 on tensor cores, float with HYPIC_CUDA_GEMM=f32.
template <class P>
struct DeviceRun {
  plan::Ctx<P> x;
  cudaDataType_t type;  // of P

  void* base(int buf) const {
    if (buf == plan::STATE) return x.state;
    if (buf == plan::TRANS) return x.trans;
    return plan::product_typed(buf) ? static_cast<void*>(x.b[buf]) : static_cast<void*>(x.f[buf]);
  }
  size_t size(int buf) const { return plan::product_typed(buf) ? sizeof(P) : sizeof(float); }
  const char* ptr(const plan::Mat& m) const {
    return static_cast<const char*>(base(m.buf)) + m.offset * int64_t(size(m.buf));
  }

  // Row-major C = α op(A) op(B) + β C through column-major cuBLAS: Cᵀ = op(B)ᵀ op(A)ᵀ.
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, plan::Mat a, plan::Mat b,
            float beta, plan::Mat c, int batch) {
    const cudaDataType_t ctype = plan::product_typed(c.buf) ? type : CUDA_R_32F;
    check(cublasGemmStridedBatchedEx(cublas_handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, ptr(b), type,
                                     b.ld, b.stride, ptr(a), type, a.ld, a.stride, &beta,
                                     const_cast<char*>(ptr(c)), ctype, c.ld, c.stride, batch,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (linear family)");
    check_launch("cublasGemmStridedBatchedEx (linear family)");
  }

  void step(plan::Step s, int chunk) {
    const int64_t n = plan::items(x, s);
    if (n == 0) return;
    if (s == plan::Step::Solve) {
      solve_kernel<P><<<static_cast<unsigned>(n), 128>>>(x);
      check_launch("family_chunked (solve)");
      return;
    }
    step_kernel<P><<<blocks_for(n), kThreads>>>(x, s, chunk, n);
    check_launch("family_chunked (step)");
  }
};

template <class P>
void run_plan(const plan::Plan& p, const FamilyInputs& in, float* state, float* out, float* trans,
              float* lr_d, float* lr_x, float* lr_y, cudaDataType_t type) {
  int64_t offsets[plan::kBufs + 1];
  plan::layout(p, sizeof(P), offsets);
  Scratch scratch(static_cast<size_t>(offsets[plan::kBufs]));
  DeviceRun<P> r{plan::make_ctx<P>(p, in, state, out, trans, scratch.as<void>(), offsets), type};
  r.x.lr_d = lr_d;
  r.x.lr_x = lr_x;
  r.x.lr_y = lr_y;
  plan::run(r, p);
}

void run_plan(const plan::Plan& p, const FamilyInputs& in, float* state, float* out, float* trans,
              float* lr_d = nullptr, float* lr_x = nullptr, float* lr_y = nullptr) {
  if (tensor_cores_flag())
    run_plan<__nv_bfloat16>(p, in, state, out, trans, lr_d, lr_x, lr_y, CUDA_R_16BF);
  else
    run_plan<float>(p, in, state, out, trans, lr_d, lr_x, lr_y, CUDA_R_32F);
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

}  // namespace

void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                    float* out, float* transition, int chunk) {
  check_family_inputs(s, d, in);
  if (chunk <= 0) throw std::invalid_argument("family_chunked: chunk must be positive");
  run_plan(plan::make_plan(s, d, out != nullptr, transition != nullptr, chunk, false), in, state,
           out, transition);
}

void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* tdiag, float* x, float* y) {
  check_family_inputs(s, d, in);
  if (!s.delta) throw std::invalid_argument("family_chunked_lowrank: only for delta members");
  run_plan(plan::make_plan(s, d, out != nullptr, false, 0, true), in, state, out, nullptr, tdiag, x,
           y);
}

void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                          float* state, float* out) {
  check_family_inputs(s, d, in);
  if (d.T == 0) return;
  family_recurrent_kernel<<<d.Hv, 128>>>(make_args(s, d, in, state, out));
  check_launch("family_recurrent_f32");
}

}  // namespace hypic::kernels::cuda
