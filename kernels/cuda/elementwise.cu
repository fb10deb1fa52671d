// Element-wise kernels: one thread per output element, f32 like the host kernels.
#include <string>

#include "../common/round_dtype.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

__global__ void gather_rows_kernel(const float* table, int cols, const int32_t* ids, int n,
                                   float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(n) * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = table[int64_t(ids[r]) * cols + c];
}

__global__ void gather_rows_bf16_kernel(const uint16_t* table, int cols, const int32_t* ids, int n,
                                        float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(n) * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = __uint_as_float(static_cast<unsigned>(table[int64_t(ids[r]) * cols + c]) << 16);
}

__global__ void swiglu_kernel(const float* gate_up, float* out, int rows, int width) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(rows) * width) return;
  const int64_t r = i / width, c = i % width;
  const float gate = gate_up[r * 2 * width + c];
  const float up = gate_up[r * 2 * width + width + c];
  out[i] = gate * sigmoidf_(gate) * up;
}

__global__ void sigmoid_gate_kernel(float* x, const float* gate, int rows, int cols, int gate_ld) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(rows) * cols) return;
  const int64_t r = i / cols, c = i % cols;
  x[i] *= sigmoidf_(gate[r * gate_ld + c]);
}

__global__ void add_sigmoid_scaled_kernel(float* x, const float* y, const float* logit, int rows,
                                          int cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(rows) * cols) return;
  x[i] += sigmoidf_(logit[i / cols]) * y[i];
}

__global__ void axpby_kernel(const float* x, float* y, int64_t n, float a, float b) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  y[i] = b == 0.0f ? a * x[i] : a * x[i] + b * y[i];
}

// torch.nn.functional.softplus with beta 1 and threshold 20 (linear above it).
__device__ float softplusf_(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__global__ void gdn_gates_kernel(const float* b, const float* a, int ld, const float* A_log,
                                 const float* dt_bias, float* beta, float* g, int rows, int heads) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(rows) * heads) return;
  const int64_t r = i / heads;
  const int h = int(i % heads);
  beta[i] = sigmoidf_(b[r * ld + h]);
  g[i] = -expf(A_log[h]) * softplusf_(a[r * ld + h] + dt_bias[h]);
}

}  // namespace

void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows, int cols) {
  if (rows == 0 || cols == 0) return;
  check(cudaMemcpy2DAsync(dst, sizeof(float) * cols, src + offset, sizeof(float) * src_ld,
                          sizeof(float) * cols, rows, cudaMemcpyDeviceToDevice, 0),
        "cudaMemcpy2DAsync (copy_strided)");
}

void gather_rows(const float* table, int cols, const int32_t* ids, int n, float* out) {
  const int64_t total = int64_t(n) * cols;
  if (total == 0) return;
  gather_rows_kernel<<<blocks_for(total), kThreads>>>(table, cols, ids, n, out);
  check_launch("gather_rows");
}

void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n, float* out) {
  const int64_t total = int64_t(n) * cols;
  if (total == 0) return;
  gather_rows_bf16_kernel<<<blocks_for(total), kThreads>>>(table, cols, ids, n, out);
  check_launch("gather_rows_bf16");
}

void swiglu(const float* gate_up, float* out, int rows, int width) {
  const int64_t total = int64_t(rows) * width;
  if (total == 0) return;
  swiglu_kernel<<<blocks_for(total), kThreads>>>(gate_up, out, rows, width);
  check_launch("swiglu");
}

void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld) {
  const int64_t total = int64_t(rows) * cols;
  if (total == 0) return;
  sigmoid_gate_kernel<<<blocks_for(total), kThreads>>>(x, gate, rows, cols, gate_ld);
  check_launch("sigmoid_gate");
}

void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows, int cols) {
  const int64_t total = int64_t(rows) * cols;
  if (total == 0) return;
  add_sigmoid_scaled_kernel<<<blocks_for(total), kThreads>>>(x, y, logit, rows, cols);
  check_launch("add_sigmoid_scaled");
}

void axpby(const float* x, float* y, int64_t n, float a, float b) {
  if (n == 0) return;
  axpby_kernel<<<blocks_for(n), kThreads>>>(x, y, n, a, b);
  check_launch("axpby");
}

void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
               float* beta, float* g, int rows, int heads) {
  const int64_t total = int64_t(rows) * heads;
  if (total == 0) return;
  gdn_gates_kernel<<<blocks_for(total), kThreads>>>(b, a, ld, A_log, dt_bias, beta, g, rows, heads);
  check_launch("gdn_gates");
}

namespace {
// Grid-stride: one pass over n values whatever the grid's size limit.
__global__ void round_to_dtype_kernel(float* x, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = bf16 ? rounding::round_bf16(x[i]) : rounding::round_f16(x[i]);
}
}  // namespace

void round_to_dtype(float* x, int64_t n, DType dtype) {
  if (dtype == DType::F32 || n == 0) return;
  if (dtype != DType::BF16 && dtype != DType::F16)
    throw Error(std::string("round_to_dtype: bf16, f16 or f32, not ") + dtype_name(dtype));
  round_to_dtype_kernel<<<blocks_for(n), kThreads>>>(x, n, dtype == DType::BF16);
  check_launch("round_to_dtype");
}

}  // namespace hypic::kernels::cuda
