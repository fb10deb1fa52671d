#pragma once
// Data movement the forward pass needs between products. Row-major, f32.
// Implementation: kernels/host/copy.cpp.
#include <cstdint>

#include "hypic/tensor.hpp"

namespace hypic::kernels {

// dst[r, 0:cols] = src[r·src_ld + offset : + cols] for r < rows (a block of columns).
void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows, int cols);

// out[i, :] = table[ids[i], :] for i < n (embedding lookup; ids must be in range).
void gather_rows(const float* table, int cols, const int32_t* ids, int n, float* out);
// The same from a bf16 table (raw bits), widened to f32 (exact).
void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n, float* out);

// x[i] ← x[i] rounded to dtype (bf16, f16: nearest, ties to even; NaN kept a NaN) and widened
// back, for i < n; F32: unchanged. Bit for bit the segment store's encoding (store/entry.hpp).
void round_to_dtype(float* x, int64_t n, DType dtype);

}  // namespace hypic::kernels
