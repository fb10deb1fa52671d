// Row-major GEMM through column-major cuBLAS: C = A·B (row-major) is Cᵀ = Bᵀ·Aᵀ (col-major).
// Products of bf16 weights run on tensor cores (bf16 × bf16, f32 accumulation, cublasGemmEx /
// cublasGemmGroupedBatchedEx with CUBLAS_COMPUTE_32F) with the activations rounded once to
// bf16, unless HYPIC_CUDA_GEMM=f32 (tensor_cores_flag() false): then the activations are split
// exactly into three bf16 terms and only the summation order differs from an f32 product.
#include <cuda_bf16.h>

#include <cstdio>
#include <vector>

#include "check.cuh"
#include "hypic/kernels/device.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
cublasHandle_t thread_handle() {
  static thread_local cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
}
cublasHandle_t handle() {
  return cublas_handle();
}
cublasOperation_t op(bool trans) {
  return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// x = t0 + t1 + t2 exactly, each term bf16 (t1, t2 the rounded remainders), as the host's
// Dot3 path: the products with bf16 weights are then exact and only the sums are f32.
__global__ void split_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* terms) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float rest = x[i];
  for (int t = 0; t < 3; ++t) {
    const __nv_bfloat16 h = __float2bfloat16_rn(rest);
    terms[t * n + i] = h;
    rest -= __bfloat162float(h);
  }
}
// out[i] = x[i] rounded to bf16 (nearest, ties to even).
__global__ void round_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

// x[0, n) rounded to bf16 into `out` (scratch the caller holds).
void round_to_bf16(const float* x, int64_t n, __nv_bfloat16* out) {
  if (n == 0) return;
  round_bf16_kernel<<<blocks_for(n), kThreads>>>(x, n, out);
  check_launch("round_bf16 (activations)");
}
}  // namespace

cublasHandle_t cublas_handle() {
  return thread_handle();
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  check(cublasSgemm(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda, &beta, c,
                    ldc),
        "cublasSgemm");
  check_launch("cublasSgemm");
}

void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublasSgemmStridedBatched(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb,
                                  stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch),
        "cublasSgemmStridedBatched");
  check_launch("cublasSgemmStridedBatched");
}

// bf16 inputs, f32 output and accumulation (tensor cores on sm_80 and later).
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const uint16_t* a,
               int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  check(cublasGemmEx(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, CUDA_R_16BF, ldb, a,
                     CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bf16)");
  check_launch("cublasGemmEx (bf16)");
}

// bf16 weights, f32 activations. Tensor cores: the activations rounded to bf16, one product.
// HYPIC_CUDA_GEMM=f32: the activations split exactly into three bf16 terms, then three bf16
// products into the f32 output (cuBLAS takes A and B in one type).
void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                 bool accumulate) {
  if (m == 0 || n == 0) return;
  const int64_t elems = int64_t(m) * k;
  if (tensor_cores_flag()) {
    Scratch scratch(static_cast<size_t>(elems) * sizeof(__nv_bfloat16));
    round_to_bf16(x, elems, scratch.as<__nv_bfloat16>());
    gemm_bf16(false, true, m, n, k, 1.0f, scratch.as<const uint16_t>(), k, w, k,
              accumulate ? 1.0f : 0.0f, y, n);
    return;
  }
  Scratch scratch(static_cast<size_t>(3 * elems) * sizeof(__nv_bfloat16));
  __nv_bfloat16* terms = scratch.as<__nv_bfloat16>();
  if (elems > 0) {
    split_bf16_kernel<<<blocks_for(elems), kThreads>>>(x, elems, terms);
    check_launch("linear_bf16 (split)");
  }
  for (int t = 0; t < 3; ++t) {
    const auto* term = reinterpret_cast<const uint16_t*>(terms + t * elems);
    const float beta = t > 0 || accumulate ? 1.0f : 0.0f;
    gemm_bf16(false, true, m, n, k, 1.0f, term, k, w, k, beta, y, n);
  }
}

// Every group's rows times its own bf16 weight in one cublasGemmGroupedBatchedEx (cuBLAS 12.5
// and later): the rows [0, start[groups]) rounded to bf16 once, the per-problem pointers
// (device_book::grouped_linear_plan) uploaded as three device arrays. Where this cuBLAS
// refuses bf16 inputs with an f32 output for the grouped call (CUBLAS_STATUS_NOT_SUPPORTED),
// one cublasGemmEx per non-empty group instead (still tensor cores; said once on stderr).
void grouped_linear_bf16(const float* x, const uint16_t* const* w, const int* start, int groups,
                         float* y, int n, int k) {
  if (groups == 0 || n == 0) return;
  const int64_t rows = start[groups];
  const int64_t elems = rows * k;
  Scratch xs(static_cast<size_t>(elems) * sizeof(__nv_bfloat16));
  round_to_bf16(x, elems, xs.as<__nv_bfloat16>());
  std::vector<const void*> wv(w, w + groups);
  const device_book::GroupedGemmPlan plan = device_book::grouped_linear_plan(
      xs.as<const void>(), sizeof(__nv_bfloat16), wv.data(), start, groups, y, n, k);
  const int p = plan.problems();
  if (p == 0) return;
  static bool grouped_refused = false;
  if (!grouped_refused) {
    std::vector<void*> ptrs(static_cast<size_t>(3) * p);  // A | B | C, in device memory
    for (int i = 0; i < p; ++i) {
      ptrs[i] = const_cast<void*>(plan.a[i]);
      ptrs[p + i] = const_cast<void*>(plan.b[i]);
      ptrs[2 * p + i] = plan.c[i];
    }
    Upload<void*> dptrs(ptrs.data(), ptrs.size());
    const std::vector<cublasOperation_t> ta(p, CUBLAS_OP_T), tb(p, CUBLAS_OP_N);
    const std::vector<float> alpha(p, 1.0f), beta(p, 0.0f);
    const std::vector<int> ones(p, 1);
    void* const* d = dptrs.get();
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        handle(), ta.data(), tb.data(), plan.m.data(), plan.n.data(), plan.k.data(), alpha.data(),
        d, CUDA_R_16BF, plan.k.data(), d + p, CUDA_R_16BF, plan.k.data(), beta.data(), d + 2 * p,
        CUDA_R_32F, plan.m.data(), p, ones.data(), CUBLAS_COMPUTE_32F);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) {
      check(st, "cublasGemmGroupedBatchedEx (bf16)");
      check_launch("cublasGemmGroupedBatchedEx (bf16)");
      return;
    }
    grouped_refused = true;
    std::fprintf(stderr,
                 "hypic: this cuBLAS has no grouped bf16 GEMM with an f32 output; the experts run "
                 "as one cublasGemmEx each\n");
  }
  for (int i = 0; i < p; ++i)
    gemm_bf16(false, true, plan.n[i], n, k, 1.0f, static_cast<const uint16_t*>(plan.b[i]), k,
              static_cast<const uint16_t*>(plan.a[i]), k, 0.0f, static_cast<float*>(plan.c[i]), n);
}

}  // namespace hypic::kernels::cuda
