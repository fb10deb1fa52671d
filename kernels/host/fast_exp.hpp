#pragma once
// exp and sigmoid as plain arithmetic, without a libm call, so that the loops that use them
// vectorise (a call to expf or fmaxf in a loop keeps GCC from vectorising it). Within a few ulp
// of libm; the kernels' tests compare against references that use std::exp.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace hypic::kernels::host {

// exp(x) for x ≤ 0 within ~1 ulp (Cephes expf polynomial after range reduction); used by the
// attention's softmax and the sigmoid below.
inline float exp_nonpositive(float x) {
  const float in = x;
  // Keeps 2^n a normal number (exp(-87) ≈ 1.6e-38) and n an integer: the comparison is false
  // for a NaN, which thus becomes -87 here and is returned as itself at the end (a non-finite
  // score stays visible downstream, and no NaN is ever converted to an integer). A select, not
  // std::fmax: GCC calls fmaxf for that, and the softmax loop then stops being vectorised
  // (the junction-pass attention took twice as long).
  x = x > -87.0f ? x : -87.0f;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return in == in ? y * scale : in;
}

// 1 / (1 + exp(-x)) through e = exp(-|x|) <= 1, so nothing overflows: 1 / (1 + e) for x >= 0,
// e / (1 + e) below. A NaN stays NaN. Below x = -87 it gives about 1.6e-38 instead of a
// smaller number (exp_nonpositive's floor), which no caller can tell from the true value.
inline float sigmoid(float x) {
  const float e = exp_nonpositive(-std::fabs(x));
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

}  // namespace hypic::kernels::host
