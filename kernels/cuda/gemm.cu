// Row-major GEMM through column-major cuBLAS: C = A·B (row-major) is Cᵀ = Bᵀ·Aᵀ (col-major).
#include "check.cuh"
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
  check(cublasSgemm(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb, a, lda, &beta, c,
                    ldc),
        "cublasSgemm");
}

void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) {
  check(cublasSgemmStridedBatched(handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, ldb,
                                  stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch),
        "cublasSgemmStridedBatched");
}

}  // namespace hypic::kernels::cuda
