// Depthwise causal conv1d + SiLU (MATH.md §3). Output rows (tokens) are independent, so they
// run in parallel (parallel.hpp); the conv state (the "conv tail") is updated at the end.
#include "hypic/kernels/conv.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "fast_exp.hpp"
#include "parallel.hpp"

namespace hypic::kernels {

void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                        int K) {
  if (T < 0 || C <= 0 || K <= 0) throw std::invalid_argument("causal_conv1d_silu: bad dims");
  const int P =
      K -
      1;  // tail length
          // Token-major: each output row reads K contiguous input rows, so the inner loop runs over
  // channels with unit stride and vectorises. The kernel is transposed once to [K, C].
  std::vector<float> wt(static_cast<size_t>(K) * C);
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < K; ++j)
      wt[static_cast<size_t>(j) * C + c] = w[static_cast<size_t>(c) * K + j];
  const float* wtp = wt.data();
  // u = state ++ x: row i < P is state row i, else x row i − P.
  host::parallel_for(T, int64_t(C) * (2 * K + 8), [=](const int64_t t) {
    float* yr = y + static_cast<size_t>(t) * C;
    for (int c = 0; c < C; ++c) yr[c] = 0.0f;
    for (int j = 0; j < K; ++j) {
      const int i = t + j;
      const float* ur =
          i < P ? state + static_cast<size_t>(i) * C : x + static_cast<size_t>(i - P) * C;
      const float* wj = wtp + static_cast<size_t>(j) * C;
      for (int c = 0; c < C; ++c) yr[c] += wj[c] * ur[c];
    }
    for (int c = 0; c < C; ++c) yr[c] *= host::sigmoid(yr[c]);  // SiLU, vectorised
  });
  // New tail: the last P rows of state ++ x, oldest first (T may be shorter than P).
  causal_conv1d_tail(x, state, T, C, K);
}

void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) {
  if (T < 0 || C <= 0 || K <= 0) throw std::invalid_argument("causal_conv1d_tail: bad dims");
  const int P = K - 1;
  if (P == 0 || T == 0) return;
  const int keep = std::max(0, P - T);  // old state rows that stay, shifted to the front
  for (int r = 0; r < keep; ++r)
    std::copy(state + static_cast<size_t>(r + T) * C, state + static_cast<size_t>(r + T + 1) * C,
              state + static_cast<size_t>(r) * C);
  for (int r = keep; r < P; ++r) {
    const int xi = T - (P - r);  // row of x that lands at tail row r
    std::copy(x + static_cast<size_t>(xi) * C, x + static_cast<size_t>(xi + 1) * C,
              state + static_cast<size_t>(r) * C);
  }
}

}  // namespace hypic::kernels
