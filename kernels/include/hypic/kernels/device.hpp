#pragma once
// The CUDA backend's entry points. Pointers passed to functions in namespace cuda are
// device memory. When hypic is built without CUDA these still link, and throw
// std::runtime_error("hypic was not compiled with CUDA ...") (kernels/cuda/not_compiled.cpp).
#include <string>

namespace hypic::kernels {

struct DeviceInfo {
  bool compiled = false;  // built with HYPIC_CUDA
  int count = 0;          // visible CUDA devices (0 when none or not compiled)
  std::string description;
};
DeviceInfo cuda_device_info();  // never throws

namespace cuda {

// C[m,n] = op(A)·op(B), row-major, through cuBLAS.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b,
          int ldb, float* c, int ldc);
// Zero-centred RMSNorm over rows: y = x · rsqrt(mean x² + eps) · (1 + w).
void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols, float eps);

// Runs each device kernel on random data and compares with the host kernel; returns a
// report line per kernel with its max abs difference. Throws when a difference exceeds tol.
std::string self_check(float tol = 1e-4f);

}  // namespace cuda
}  // namespace hypic::kernels
