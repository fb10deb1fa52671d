#include "hypic/kernels/copy.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "../common/round_dtype.hpp"
#include "parallel.hpp"

namespace hypic::kernels {

void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows, int cols) {
  host::parallel_for(rows, cols, [=](const int64_t r) {
    std::memcpy(dst + static_cast<size_t>(r) * cols, src + static_cast<size_t>(r) * src_ld + offset,
                sizeof(float) * static_cast<size_t>(cols));
  });
}

void gather_rows(const float* table, int cols, const int32_t* ids, int n, float* out) {
  host::parallel_for(n, cols, [=](const int64_t i) {
    std::memcpy(out + static_cast<size_t>(i) * cols, table + static_cast<size_t>(ids[i]) * cols,
                sizeof(float) * static_cast<size_t>(cols));
  });
}

void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n, float* out) {
  host::parallel_for(n, cols, [=](const int64_t i) {
    const uint16_t* src = table + static_cast<size_t>(ids[i]) * cols;
    float* dst = out + static_cast<size_t>(i) * cols;
    for (int c = 0; c < cols; ++c) {
      const uint32_t bits = static_cast<uint32_t>(src[c]) << 16;
      std::memcpy(dst + c, &bits, sizeof(float));
    }
  });
}

void round_to_dtype(float* x, int64_t n, DType dtype) {
  if (dtype == DType::F32) return;
  HYPIC_REQUIRE(dtype == DType::BF16 || dtype == DType::F16,
                std::string("round_to_dtype: bf16, f16 or f32, not ") + dtype_name(dtype));
  constexpr int64_t kBlock = 4096;  // elements per parallel item
  const bool bf16 = dtype == DType::BF16;
  host::parallel_for((n + kBlock - 1) / kBlock, kBlock, [=](const int64_t blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    for (int64_t i = blk * kBlock; i < end; ++i)
      x[i] = bf16 ? rounding::round_bf16(x[i]) : rounding::round_f16(x[i]);
  });
}

}  // namespace hypic::kernels
