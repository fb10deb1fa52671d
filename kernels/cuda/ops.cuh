#pragma once
// The CUDA backend's kernels (device pointers throughout), behind cuda_backend().
#include <cstdint>

namespace hypic::kernels::cuda {

// C[m,n] = alpha · op(A)·op(B) + beta · C, row-major, through cuBLAS.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch);
// Zero-centred RMSNorm over rows: y = x · rsqrt(mean x² + eps) · (1 + w).
void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols, float eps);

}  // namespace hypic::kernels::cuda
