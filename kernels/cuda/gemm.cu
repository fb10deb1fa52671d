// Row-major GEMM through column-major cuBLAS: C = A·B (row-major) is Cᵀ = Bᵀ·Aᵀ (col-major).
#include <cuda_bf16.h>

#include "check.cuh"
#include "hypic/kernels/device.hpp"
#include "ops.cuh"

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
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  check(cublasSgemm(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda, &beta, c,
                    ldc),
        "cublasSgemm");
}

void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  check(cublasSgemmStridedBatched(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb,
                                  stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch),
        "cublasSgemmStridedBatched");
}

// bf16 inputs, f32 output and accumulation (tensor cores on sm_80 and later).
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const uint16_t* a,
               int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  check(cublasGemmEx(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, CUDA_R_16BF, ldb, a,
                     CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bf16)");
}

}  // namespace hypic::kernels::cuda
