#pragma once
// The checks every attention_causal makes of its explicit query positions (AttentionDims::
// positions), shared by the host kernel, the CUDA kernel (on a host copy of the positions) and
// the layers that upload positions to a device (before the upload), so that the device path
// rejects exactly what the host rejects instead of reading keys out of range.
#include <stdexcept>
#include <string>

namespace hypic::kernels {

// positions[0 … T): strictly ascending, each in [0, n_kv).
inline void check_query_positions(const int* positions, int T, int n_kv) {
  for (int t = 0; t < T; ++t) {
    const int p = positions[t];
    const int lo = t > 0 ? positions[t - 1] + 1 : 0;
    if (p >= n_kv || p < lo)
      throw std::invalid_argument("attention_causal: positions must ascend below n_kv (query " +
                                  std::to_string(t) + " at position " + std::to_string(p) +
                                  ", n_kv " + std::to_string(n_kv) + ")");
  }
}

}  // namespace hypic::kernels
