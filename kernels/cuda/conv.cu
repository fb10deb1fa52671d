// Depthwise causal conv1d + SiLU: one thread per (token, channel). The conv tail is rebuilt
// out of place (new rows may come from old state rows that other threads overwrite).
#include <stdexcept>

#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

// u = state ++ x: row i < P is state row i, else x row i − P.
__global__ void conv1d_silu_kernel(const float* x, const float* w, const float* state, float* y,
                                   int T, int C, int K) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(T) * C) return;
  const int t = int(i / C), c = int(i % C);
  const int P = K - 1;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int r = t + j;
    const float u = r < P ? state[int64_t(r) * C + c] : x[int64_t(r - P) * C + c];
    acc += w[int64_t(c) * K + j] * u;
  }
  y[i] = acc / (1.0f + expf(-acc));
}

// tail[r] = row P − (P − r) … : the last P rows of state ++ x, oldest first.
__global__ void conv_tail_kernel(const float* x, const float* state, float* tail, int T, int C,
                                 int P) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(P) * C) return;
  const int r = int(i / C), c = int(i % C);
  const int u = T + r;  // row of u = state ++ x that lands at tail row r
  tail[i] = u < P ? state[int64_t(u) * C + c] : x[int64_t(u - P) * C + c];
}

}  // namespace

void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) {
  if (T < 0 || C <= 0 || K <= 0) throw std::invalid_argument("causal_conv1d_tail: bad dims");
  const int P = K - 1;
  if (P == 0 || T == 0) return;
  const int64_t n = int64_t(P) * C;
  Scratch tail(sizeof(float) * n);
  conv_tail_kernel<<<blocks_for(n), kThreads>>>(x, state, tail.as<float>(), T, C, P);
  check_launch("causal_conv1d_tail");
  check(cudaMemcpyAsync(state, tail.as<float>(), sizeof(float) * n, cudaMemcpyDeviceToDevice, 0),
        "cudaMemcpyAsync (conv tail)");
}

void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                        int K) {
  if (T < 0 || C <= 0 || K <= 0) throw std::invalid_argument("causal_conv1d_silu: bad dims");
  if (T > 0) {
    conv1d_silu_kernel<<<blocks_for(int64_t(T) * C), kThreads>>>(x, w, state, y, T, C, K);
    check_launch("causal_conv1d_silu");
  }
  causal_conv1d_tail(x, state, T, C, K);  // after the outputs, in stream order
}

}  // namespace hypic::kernels::cuda
