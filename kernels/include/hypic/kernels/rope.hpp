#pragma once
// Partial rotary position embedding (MATH.md §4), neox rotate_half pairing: in each head the
// first rotary_dim dims rotate as pairs (i, i + rotary_dim/2) by angle pos · inv_freq[i],
// inv_freq[i] = θ^(−2i/rotary_dim); the remaining dims pass through unchanged.
// Implementation: kernels/host/rope.cpp.
#include <cstdint>

namespace hypic::kernels {

struct RopeDims {
  int T = 0;           // tokens (rows)
  int heads = 0;       // heads per token
  int head_dim = 0;    // values per head
  int rotary_dim = 0;  // leading dims of each head that rotate (even, ≤ head_dim)
  float theta = 10000.0f;
};

// x: [T, heads, head_dim]. Token t is rotated to absolute position pos0 + t.
void rope_apply(const RopeDims& d, float* x, int64_t pos0);

// x: [T, heads, head_dim] already rotated at some positions; moves every token by delta
// positions (RoPE angles add), e.g. re-rotating cached keys from segment-local positions.
void rope_shift(const RopeDims& d, float* x, int64_t delta);

}  // namespace hypic::kernels
