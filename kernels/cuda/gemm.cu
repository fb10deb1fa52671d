// Row-major GEMM through column-major cuBLAS: C = A·B (row-major) is Cᵀ = Bᵀ·Aᵀ (col-major).
#include "check.cuh"
#include "hypic/kernels/device.hpp"

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
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  check(cublasSgemm(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b, ldb, a, lda, &zero, c,
                    ldc),
        "cublasSgemm");
}

}  // namespace hypic::kernels::cuda
