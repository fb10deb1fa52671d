// Host element-wise activations: rows in parallel (parallel.hpp), f32 like the references.
#include "hypic/kernels/activation.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fast_exp.hpp"
#include "parallel.hpp"

namespace hypic::kernels {
namespace {

using host::sigmoid;  // fast_exp.hpp: vectorisable, no libm call

// torch.nn.functional.softplus with beta 1 and threshold 20 (linear above it).
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}
}  // namespace

void swiglu(const float* gate_up, float* out, int rows, int width) {
  host::parallel_for(rows, 8 * int64_t(width), [=](const int64_t r) {
    const float* gate = gate_up + static_cast<size_t>(r) * 2 * width;
    const float* up = gate + width;
    float* y = out + static_cast<size_t>(r) * width;
    for (int i = 0; i < width; ++i) y[i] = gate[i] * sigmoid(gate[i]) * up[i];
  });
}

void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld) {
  host::parallel_for(rows, 8 * int64_t(cols), [=](const int64_t r) {
    float* xr = x + static_cast<size_t>(r) * cols;
    const float* gr = gate + static_cast<size_t>(r) * gate_ld;
    for (int c = 0; c < cols; ++c) xr[c] *= sigmoid(gr[c]);
  });
}

void axpby(const float* x, float* y, int64_t n, float a, float b) {
  constexpr int64_t kBlock = 4096;  // elements per parallel item
  host::parallel_for((n + kBlock - 1) / kBlock, 2 * kBlock, [=](const int64_t blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    if (b == 0.0f)
      for (int64_t i = blk * kBlock; i < end; ++i) y[i] = a * x[i];
    else
      for (int64_t i = blk * kBlock; i < end; ++i) y[i] = a * x[i] + b * y[i];
  });
}

void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows, int cols) {
  host::parallel_for(rows, 2 * int64_t(cols), [=](const int64_t r) {
    float* xr = x + static_cast<size_t>(r) * cols;
    const float* yr = y + static_cast<size_t>(r) * cols;
    const float s = sigmoid(logit[r]);
    for (int c = 0; c < cols; ++c) xr[c] += s * yr[c];
  });
}

void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
               float* beta, float* g, int rows, int heads) {
  host::parallel_for(rows, 16 * int64_t(heads), [=](const int64_t r) {
    const float* br = b + static_cast<size_t>(r) * ld;
    const float* ar = a + static_cast<size_t>(r) * ld;
    for (int h = 0; h < heads; ++h) {
      const size_t i = static_cast<size_t>(r) * heads + h;
      beta[i] = sigmoid(br[h]);
      g[i] = -std::exp(A_log[h]) * softplus(ar[h] + dt_bias[h]);
    }
  });
}

}  // namespace hypic::kernels
