// Host partial RoPE. Angles for absolute positions are formed in f32 (position · inv_freq),
// as transformers does, so logits match it; shifts use double angles, which keeps repeated
// re-rotation of cached keys accurate.
#include "hypic/kernels/rope.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "parallel.hpp"

namespace hypic::kernels {
namespace {
constexpr int kMaxRopeHalf = 1024;  // rotary_dim up to 2048

// inv_freq[i] = 1 / θ^(2i/rot), in f32 as transformers computes it.
std::vector<float> inverse_frequencies(int rotary_dim, float theta) {
  std::vector<float> inv(static_cast<size_t>(rotary_dim / 2));
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.0f / std::pow(theta, exponent);
  }
  return inv;
}

// Rotates pairs (i, i + half) of every head of one token by the given cos/sin table.
inline void rotate_token(float* x, int heads, int head_dim, int half, const float* cs,
                         const float* sn) {
  for (int h = 0; h < heads; ++h) {
    float* xh = x + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x1 = xh[i];
      const float x2 = xh[i + half];
      xh[i] = x1 * cs[i] - x2 * sn[i];
      xh[i + half] = x2 * cs[i] + x1 * sn[i];
    }
  }
}

void check(const RopeDims& d) {
  if (d.rotary_dim % 2 != 0 || d.rotary_dim < 0 || d.rotary_dim > d.head_dim ||
      d.rotary_dim / 2 > kMaxRopeHalf)
    throw std::invalid_argument("rope: rotary_dim must be even, at most head_dim and 2048");
}
}  // namespace

void rope_apply(const RopeDims& d, float* x, int64_t pos0) {
  check(d);
  const int half = d.rotary_dim / 2;
  if (half == 0 || d.T == 0) return;
  const std::vector<float> inv = inverse_frequencies(d.rotary_dim, d.theta);
  const float* inv_freq = inv.data();
  const size_t token_stride = static_cast<size_t>(d.heads) * d.head_dim;
  host::parallel_for(d.T, 16 * int64_t(half) + 6 * int64_t(d.heads) * half, [=](const int64_t t) {
    float cs[kMaxRopeHalf];
    float sn[kMaxRopeHalf];
    const float pos = static_cast<float>(pos0 + t);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];  // f32 product, as transformers
      cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    rotate_token(x + t * token_stride, d.heads, d.head_dim, half, cs, sn);
  });
}

void rope_shift(const RopeDims& d, float* x, int64_t delta) {
  check(d);
  const int half = d.rotary_dim / 2;
  if (half == 0 || d.T == 0 || delta == 0) return;
  float cs[kMaxRopeHalf];
  float sn[kMaxRopeHalf];
  for (int i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(static_cast<double>(d.theta),
                 -static_cast<double>(2 * i) / static_cast<double>(d.rotary_dim));
    const double angle = static_cast<double>(delta) * inv_freq;
    cs[i] = static_cast<float>(std::cos(angle));
    sn[i] = static_cast<float>(std::sin(angle));
  }
  const size_t token_stride = static_cast<size_t>(d.heads) * d.head_dim;
  const float* c = cs;
  const float* s = sn;
  host::parallel_for(d.T, 6 * int64_t(d.heads) * half, [=](const int64_t t) {
    rotate_token(x + t * token_stride, d.heads, d.head_dim, half, c, s);
  });
}

}  // namespace hypic::kernels
