// Host RMS norms: one Kokkos work item per row, in double-free f32 like the references
// (transformers computes these norms in f32).
#include "hypic/kernels/norm.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>

namespace hypic::kernels {
namespace {
using HostExec = Kokkos::DefaultHostExecutionSpace;

inline float inv_rms(const float* row, int cols, float eps) {
  float ss = 0.0f;
  for (int c = 0; c < cols; ++c) ss += row[c] * row[c];
  return 1.0f / std::sqrt(ss / static_cast<float>(cols) + eps);
}
}  // namespace

void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                           float eps) {
  Kokkos::parallel_for("rms_norm_zero_centred", Kokkos::RangePolicy<HostExec>(0, rows),
                       [=](const int r) {
                         const float* xr = x + static_cast<size_t>(r) * cols;
                         float* yr = y + static_cast<size_t>(r) * cols;
                         const float s = inv_rms(xr, cols, eps);
                         for (int c = 0; c < cols; ++c) yr[c] = xr[c] * s * (1.0f + w[c]);
                       });
}

void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                    float eps) {
  Kokkos::parallel_for("gated_rms_norm", Kokkos::RangePolicy<HostExec>(0, rows), [=](const int r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    const float* zr = z + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * cols;
    const float s = inv_rms(xr, cols, eps);
    for (int c = 0; c < cols; ++c) {
      const float gate = zr[c] / (1.0f + std::exp(-zr[c]));
      yr[c] = w[c] * (xr[c] * s) * gate;
    }
  });
}

void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) {
  Kokkos::parallel_for("l2_normalize_rows", Kokkos::RangePolicy<HostExec>(0, rows),
                       [=](const int r) {
                         float* xr = x + static_cast<size_t>(r) * cols;
                         float ss = 0.0f;
                         for (int c = 0; c < cols; ++c) ss += xr[c] * xr[c];
                         const float s = scale / std::sqrt(ss + eps);
                         for (int c = 0; c < cols; ++c) xr[c] *= s;
                       });
}

}  // namespace hypic::kernels
