// Rotary embeddings. The angle tables are formed on the host exactly as the host kernels form
// them (f32 inverse frequencies for absolute positions, double angles for shifts and
// re-rotation) and uploaded, so both backends rotate by the same angles.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

// One thread per (token, head, pair): x[i], x[i + half] rotated by angle pos · inv_freq[i]
// formed in f32 (transformers' rounding), cos/sin in double.
__global__ void rope_apply_kernel(float* x, int T, int heads, int head_dim, int half,
                                  const float* inv_freq, int64_t pos0) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(T) * heads * half) return;
  const int p = int(i % half);
  const int64_t th = i / half;  // token · heads + head
  const int t = int(th / heads);
  float* xh = x + th * head_dim;
  const float angle = __fmul_rn(float(pos0 + t), inv_freq[p]);
  const float c = float(cos(double(angle))), s = float(sin(double(angle)));
  const float x1 = xh[p], x2 = xh[p + half];
  xh[p] = x1 * c - x2 * s;
  xh[p + half] = x2 * c + x1 * s;
}

// One thread per (row, pair) with a shared f32 cos/sin table (rope_shift).
__global__ void rope_shift_kernel(float* x, int64_t rows, int head_dim, int half, const float* cs,
                                  const float* sn) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= rows * half) return;
  const int p = int(i % half);
  float* xh = x + (i / half) * head_dim;
  const float x1 = xh[p], x2 = xh[p + half];
  xh[p] = x1 * cs[p] - x2 * sn[p];
  xh[p + half] = x2 * cs[p] + x1 * sn[p];
}

// Pair (a, b) of element rotated in double (rotary_rotate's rounding). Rows: element j of pair
// p sits at x[row · ld + index]; columns: at m[index · cols + col].
__device__ void rotate_pair(float& a, float& b, double c, double s) {
  const double x = a, y = b;
  a = float(x * c - y * s);
  b = float(x * s + y * c);
}

__global__ void rotary_rows_kernel(float* x, int n, int ld, int half, bool interleaved,
                                   const double* cs, const double* sn) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(n) * half) return;
  const int p = int(i % half);
  float* xr = x + (i / half) * ld;
  const int a = interleaved ? 2 * p : p, b = interleaved ? 2 * p + 1 : p + half;
  rotate_pair(xr[a], xr[b], cs[p], sn[p]);
}

__global__ void rotary_columns_kernel(float* m, int cols, int half, bool interleaved,
                                      const double* cs, const double* sn) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(cols) * half) return;
  const int p = int(i / cols), col = int(i % cols);
  const int a = interleaved ? 2 * p : p, b = interleaved ? 2 * p + 1 : p + half;
  rotate_pair(m[int64_t(a) * cols + col], m[int64_t(b) * cols + col], cs[p], sn[p]);
}

// One thread per (head, pair, column) of [heads, dk, dv] states, rotated in place in dst (a
// copy of src when they differ, made before the launch).
__global__ void rerotate_states_kernel(float* dst, int64_t items, int dk, int dv, int half,
                                       bool interleaved, const double* cs, const double* sn) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= items) return;
  const int col = int(i % dv);
  const int64_t hp = i / dv;  // head · half + pair
  const int p = int(hp % half);
  float* m = dst + (hp / half) * int64_t(dk) * dv;
  const int a = interleaved ? 2 * p : p, b = interleaved ? 2 * p + 1 : p + half;
  rotate_pair(m[int64_t(a) * dv + col], m[int64_t(b) * dv + col], cs[p], sn[p]);
}

void check_rope(const RopeDims& d) {
  if (d.rotary_dim % 2 != 0 || d.rotary_dim < 0 || d.rotary_dim > d.head_dim)
    throw std::invalid_argument("rope: rotary_dim must be even and at most head_dim");
}

// cos/sin of pos · θ^(−2i/rot) in double, as rotary_rotate (linear_family.cpp) forms them.
void rotary_tables(const Rotary& r, int64_t pos, std::vector<double>& cs, std::vector<double>& sn) {
  const int half = r.rotary_dim / 2;
  cs.resize(half);
  sn.resize(half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(static_cast<double>(r.theta), -2.0 * i / r.rotary_dim);
    const double angle = static_cast<double>(pos) * inv_freq;
    cs[i] = std::cos(angle);
    sn[i] = std::sin(angle);
  }
}

}  // namespace

void rope_apply(const RopeDims& d, float* x, int64_t pos0) {
  check_rope(d);
  const int half = d.rotary_dim / 2;
  if (half == 0 || d.T == 0 || d.heads == 0) return;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {  // f32, as transformers (and kernels/host/rope.cpp)
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d.rotary_dim);
    inv[i] = 1.0f / std::pow(d.theta, exponent);
  }
  const Upload<float> table(inv.data(), inv.size());
  const int64_t n = int64_t(d.T) * d.heads * half;
  rope_apply_kernel<<<blocks_for(n), kThreads>>>(x, d.T, d.heads, d.head_dim, half, table.get(),
                                                 pos0);
  check_launch("rope_apply");
}

void rope_shift(const RopeDims& d, float* x, int64_t delta) {
  check_rope(d);
  const int half = d.rotary_dim / 2;
  if (half == 0 || d.T == 0 || d.heads == 0 || delta == 0) return;
  std::vector<float> cs(half), sn(half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(static_cast<double>(d.theta),
                 -static_cast<double>(2 * i) / static_cast<double>(d.rotary_dim));
    const double angle = static_cast<double>(delta) * inv_freq;
    cs[i] = static_cast<float>(std::cos(angle));
    sn[i] = static_cast<float>(std::sin(angle));
  }
  const Upload<float> dc(cs.data(), cs.size()), ds(sn.data(), sn.size());
  const int64_t rows = int64_t(d.T) * d.heads;
  rope_shift_kernel<<<blocks_for(rows * half), kThreads>>>(x, rows, d.head_dim, half, dc.get(),
                                                           ds.get());
  check_launch("rope_shift");
}

void rotary_rotate_rows(const Rotary& r, float* x, int n, int ld, int dk, int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rotary_rotate: rotary_dim must be even and <= dk");
  const int half = r.rotary_dim / 2;
  if (half == 0 || n == 0) return;
  std::vector<double> cs, sn;
  rotary_tables(r, pos, cs, sn);
  const Upload<double> dc(cs.data(), cs.size()), ds(sn.data(), sn.size());
  rotary_rows_kernel<<<blocks_for(int64_t(n) * half), kThreads>>>(x, n, ld, half, r.interleaved,
                                                                  dc.get(), ds.get());
  check_launch("rotary_rotate_rows");
}

void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols, int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rotary_rotate_columns: rotary_dim must be even and <= dk");
  const int half = r.rotary_dim / 2;
  if (half == 0 || cols == 0) return;
  std::vector<double> cs, sn;
  rotary_tables(r, pos, cs, sn);
  const Upload<double> dc(cs.data(), cs.size()), ds(sn.data(), sn.size());
  rotary_columns_kernel<<<blocks_for(int64_t(cols) * half), kThreads>>>(
      m, cols, half, r.interleaved, dc.get(), ds.get());
  check_launch("rotary_rotate_columns");
}

void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                     int64_t pos) {
  if (r.rotary_dim % 2 != 0 || r.rotary_dim > dk)
    throw std::invalid_argument("rerotate_states: rotary_dim must be even and <= dk");
  const int64_t floats = int64_t(heads) * dk * dv;
  if (floats == 0) return;
  if (dst != src)  // on the compute stream, so the launch below sees the copy
    check(cudaMemcpyAsync(dst, src, size_t(floats) * sizeof(float), cudaMemcpyDeviceToDevice, 0),
          "cudaMemcpy D2D (rerotate_states)");
  const int half = r.rotary_dim / 2;
  if (half == 0) return;
  std::vector<double> cs, sn;
  rotary_tables(r, pos, cs, sn);
  const Upload<double> dc(cs.data(), cs.size()), ds(sn.data(), sn.size());
  const int64_t items = int64_t(heads) * half * dv;
  rerotate_states_kernel<<<blocks_for(items), kThreads>>>(dst, items, dk, dv, half, r.interleaved,
                                                          dc.get(), ds.get());
  check_launch("rerotate_states");
}

}  // namespace hypic::kernels::cuda
