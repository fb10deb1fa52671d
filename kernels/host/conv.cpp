// Depthwise causal conv1d + SiLU (MATH.md §3). Channels are independent, so they run as one
// Kokkos parallel_for; the conv state (the "conv tail") is updated at the end.
#include "hypic/kernels/conv.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace hypic::kernels {

void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                        int K) {
  if (T < 0 || C <= 0 || K <= 0) throw std::invalid_argument("causal_conv1d_silu: bad dims");
  const int P = K - 1;  // tail length
  using HostExec = Kokkos::DefaultHostExecutionSpace;
  // u = state ++ x, read in place: index i < P is state row i, else x row i − P.
  Kokkos::parallel_for("causal_conv1d_silu", Kokkos::RangePolicy<HostExec>(0, C), [=](const int c) {
    const float* wc = w + static_cast<size_t>(c) * K;
    for (int t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) {
        const int i = t + j;
        const float u =
            i < P ? state[static_cast<size_t>(i) * C + c] : x[static_cast<size_t>(i - P) * C + c];
        acc += wc[j] * u;
      }
      y[static_cast<size_t>(t) * C + c] = acc / (1.0f + std::exp(-acc));
    }
    // New tail: the last P rows of state ++ x, oldest first (T may be shorter than P).
    if (P > 0) {
      float tail[64];
      std::vector<float> big;
      float* tl = tail;
      if (P > 64) big.resize(P), tl = big.data();
      for (int r = 0; r < P; ++r) {
        const int i = T + r;  // index in u of the r-th tail row
        tl[r] =
            i < P ? state[static_cast<size_t>(i) * C + c] : x[static_cast<size_t>(i - P) * C + c];
      }
      for (int r = 0; r < P; ++r) state[static_cast<size_t>(r) * C + c] = tl[r];
    }
  });
  Kokkos::fence();
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
