#pragma once
// f32 → bf16 / f16 → f32 rounding of one value, as the segment store encodes (store/entry.cpp:
// nearest, ties to even; NaN stays a NaN with its payload's top bits; overflow to infinity),
// written once for the host kernels and the CUDA kernels (compiled by both compilers).
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HYPIC_HOST_DEVICE __host__ __device__
#else
#define HYPIC_HOST_DEVICE
#endif

namespace hypic::kernels::rounding {

HYPIC_HOST_DEVICE inline uint32_t bits_of(float v) {
  uint32_t x;
  std::memcpy(&x, &v, sizeof(x));
  return x;
}
HYPIC_HOST_DEVICE inline float float_of(uint32_t x) {
  float v;
  std::memcpy(&v, &x, sizeof(v));
  return v;
}

HYPIC_HOST_DEVICE inline float round_bf16(float value) {
  uint32_t x = bits_of(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return float_of(((x >> 16) | 0x0040u) << 16);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return float_of((x >> 16) << 16);
}

// value >> shift, rounded to nearest, ties to even.
HYPIC_HOST_DEVICE inline uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

HYPIC_HOST_DEVICE inline uint16_t f32_to_f16(float value) {
  const uint32_t x = bits_of(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {
    if (magnitude == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u)
    return static_cast<uint16_t>(sign | shift_round_even(magnitude - (112u << 23), 13));
  const int exponent = static_cast<int>(magnitude >> 23);
  if (exponent < 102) return static_cast<uint16_t>(sign);
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_round_even(mantissa, 126 - exponent));
}

HYPIC_HOST_DEVICE inline float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return float_of(bits_of(magnitude) | sign);
  }
  if (exponent == 31) return float_of(sign | 0x7F800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

HYPIC_HOST_DEVICE inline float round_f16(float value) {
  return f16_to_f32(f32_to_f16(value));
}

}  // namespace hypic::kernels::rounding
