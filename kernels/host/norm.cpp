// Host RMS norms: rows in parallel (parallel.hpp), in double-free f32 like the references
// (transformers computes these norms in f32).
#include "hypic/kernels/norm.hpp"

#include <cmath>
#include <cstdint>

#include "fast_exp.hpp"
#include "parallel.hpp"

namespace hypic::kernels {
namespace {

inline float inv_rms(const float* row, int cols, float eps) {
  float ss = 0.0f;
  for (int c = 0; c < cols; ++c) ss += row[c] * row[c];
  return 1.0f / std::sqrt(ss / static_cast<float>(cols) + eps);
}
}  // namespace

void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                           float eps) {
  host::parallel_for(rows, 4 * int64_t(cols), [=](const int64_t r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * cols;
    const float s = inv_rms(xr, cols, eps);
    for (int c = 0; c < cols; ++c) yr[c] = xr[c] * s * (1.0f + w[c]);
  });
}

void rms_norm(const float* x, const float* w, float* y, int rows, int cols, float eps) {
  host::parallel_for(rows, 4 * int64_t(cols), [=](const int64_t r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * cols;
    const float s = inv_rms(xr, cols, eps);
    for (int c = 0; c < cols; ++c) yr[c] = xr[c] * s * w[c];
  });
}

void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                    float eps) {
  host::parallel_for(rows, 12 * int64_t(cols), [=](const int64_t r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    const float* zr = z + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * cols;
    const float s = inv_rms(xr, cols, eps);
    for (int c = 0; c < cols; ++c) {
      const float gate = zr[c] * host::sigmoid(zr[c]);  // SiLU, vectorised
      yr[c] = w[c] * (xr[c] * s) * gate;
    }
  });
}

void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) {
  host::parallel_for(rows, 3 * int64_t(cols), [=](const int64_t r) {
    float* xr = x + static_cast<size_t>(r) * cols;
    float ss = 0.0f;
    for (int c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float s = scale / std::sqrt(ss + eps);
    for (int c = 0; c < cols; ++c) xr[c] *= s;
  });
}

}  // namespace hypic::kernels
