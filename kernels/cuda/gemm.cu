// Row-major GEMM through column-major cuBLAS: C = A·B (row-major) is Cᵀ = Bᵀ·Aᵀ (col-major).
#include <cuda_bf16.h>

#include "check.cuh"
#include "hypic/kernels/device.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
cublasHandle_t handle() {
  static thread_local cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
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
}  // namespace

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

// bf16 weights, f32 activations: the activations split exactly into three bf16 terms, then
// three bf16 products into the f32 output (cuBLAS takes A and B in one type).
void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                 bool accumulate) {
  if (m == 0 || n == 0) return;
  const int64_t elems = int64_t(m) * k;
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

}  // namespace hypic::kernels::cuda
