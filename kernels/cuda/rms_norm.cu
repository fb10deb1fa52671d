// Zero-centred RMSNorm: one block per row, a shared-memory reduction of Σx².
#include "check.cuh"
#include "ops.cuh"

namespace hypic::kernels::cuda {
namespace {
constexpr int kThreads = 256;

__global__ void rms_norm_zc_kernel(const float* x, const float* w, float* y, int cols, float eps) {
  __shared__ float partial[kThreads];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float s = rsqrtf(partial[0] / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * s * (1.0f + w[c]);
}
}  // namespace

void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                           float eps) {
  if (rows == 0) return;
  rms_norm_zc_kernel<<<rows, kThreads>>>(x, w, y, cols, eps);
  check(cudaGetLastError(), "rms_norm_zero_centred launch");
}

}  // namespace hypic::kernels::cuda
