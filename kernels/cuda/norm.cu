// Row-wise norms: one block per row, Σx² reduced over the block, then the row scaled.
// y may alias x (each element is read before it is written, by the same thread).
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

__device__ float row_sum_squares(const float* xr, int cols, float* shared) {
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
  return block_sum(ss, shared);
}

__global__ void rms_norm_zc_kernel(const float* x, const float* w, float* y, int cols, float eps) {
  __shared__ float shared[32];
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y + int64_t(blockIdx.x) * cols;
  const float s = 1.0f / sqrtf(row_sum_squares(xr, cols, shared) / float(cols) + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * s * (1.0f + w[c]);
}

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int cols, float eps) {
  __shared__ float shared[32];
  const float* xr = x + int64_t(blockIdx.x) * cols;
  float* yr = y + int64_t(blockIdx.x) * cols;
  const float s = 1.0f / sqrtf(row_sum_squares(xr, cols, shared) / float(cols) + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * s * w[c];
}

__global__ void gated_rms_norm_kernel(const float* x, const float* z, const float* w, float* y,
                                      int cols, float eps) {
  __shared__ float shared[32];
  const int64_t row = int64_t(blockIdx.x) * cols;
  const float* xr = x + row;
  const float* zr = z + row;
  float* yr = y + row;
  const float s = 1.0f / sqrtf(row_sum_squares(xr, cols, shared) / float(cols) + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float gate = zr[c] / (1.0f + expf(-zr[c]));
    yr[c] = w[c] * (xr[c] * s) * gate;
  }
}

__global__ void l2_normalize_kernel(float* x, int cols, float eps, float scale) {
  __shared__ float shared[32];
  float* xr = x + int64_t(blockIdx.x) * cols;
  const float s = scale / sqrtf(row_sum_squares(xr, cols, shared) + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] *= s;
}

// Rows are short (head dims 48 … 256; hidden sizes a few thousand): 128 threads per row.
constexpr int kRowThreads = 128;

}  // namespace

void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                           float eps) {
  if (rows == 0 || cols == 0) return;
  rms_norm_zc_kernel<<<rows, kRowThreads>>>(x, w, y, cols, eps);
  check_launch("rms_norm_zero_centred");
}

void rms_norm(const float* x, const float* w, float* y, int rows, int cols, float eps) {
  if (rows == 0 || cols == 0) return;
  rms_norm_kernel<<<rows, kRowThreads>>>(x, w, y, cols, eps);
  check_launch("rms_norm");
}

void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                    float eps) {
  if (rows == 0 || cols == 0) return;
  gated_rms_norm_kernel<<<rows, kRowThreads>>>(x, z, w, y, cols, eps);
  check_launch("gated_rms_norm");
}

void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) {
  if (rows == 0 || cols == 0) return;
  l2_normalize_kernel<<<rows, kRowThreads>>>(x, cols, eps, scale);
  check_launch("l2_normalize_rows");
}

}  // namespace hypic::kernels::cuda
