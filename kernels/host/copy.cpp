#include "hypic/kernels/copy.hpp"

#include <cstddef>
#include <cstring>

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

}  // namespace hypic::kernels
