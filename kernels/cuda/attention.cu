// Causal attention with grouped key/value heads as a tiled online softmax (the flash-attention
// recurrence): a block owns kQ queries of one head and walks the visible keys kK at a time
// through shared memory, keeping per query the running max m, the running sum l and the
// unnormalised output. Memory is the inputs and outputs only: no n_kv-sized scratch, so a
// 32k-token segment costs nothing beyond its K/V cache. Plain f32 FMA loops, no tensor cores.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "hypic/kernels/attention_checks.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
constexpr int kQ = 16;  // queries per block
constexpr int kK = 32;  // keys per tile
constexpr int kAttnThreads = 128;

size_t shared_bytes(int hd) {
  // q [kQ, hd], o [kQ, hd], k [kK, hd], v [kK, hd], p [kQ, kK], m, l, corr [kQ]
  return sizeof(float) * (size_t(2 * kQ + 2 * kK) * hd + kQ * kK + 3 * kQ);
}

__global__ void attention_kernel(const float* q, const float* k, const float* v, float* out, int T,
                                 int n_kv, int H, int Hkv, int hd, float scale,
                                 const int* positions) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* os = qs + kQ * hd;
  float* ks = os + kQ * hd;
  float* vs = ks + kK * hd;
  float* p = vs + kK * hd;
  float* m = p + kQ * kK;
  float* l = m + kQ;
  float* corr = l + kQ;

  const int h = blockIdx.y, g = h / (H / Hkv);
  const int t0 = blockIdx.x * kQ;
  const int nq = min(kQ, T - t0);
  const int past = n_kv - T;
  // Query t0 + r sits at position pos(r) and sees keys 0 … pos(r) (positions ascend).
  auto pos = [&](int r) { return positions != nullptr ? positions[t0 + r] : past + t0 + r; };
  const int64_t q_ld = int64_t(H) * hd, kv_ld = int64_t(Hkv) * hd;

  for (int i = threadIdx.x; i < kQ * hd; i += blockDim.x) {
    const int r = i / hd, c = i % hd;
    qs[i] = r < nq ? q[int64_t(t0 + r) * q_ld + int64_t(h) * hd + c] : 0.0f;
    os[i] = 0.0f;
  }
  if (threadIdx.x < kQ) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0.0f;
  }
  __syncthreads();

  const int last_key = pos(nq - 1);  // visible to the block's last query
  for (int k0 = 0; k0 <= last_key; k0 += kK) {
    const int nk = min(kK, last_key + 1 - k0);
    for (int i = threadIdx.x; i < kK * hd; i += blockDim.x) {
      const int r = i / hd, c = i % hd;
      const int64_t src = int64_t(k0 + r) * kv_ld + int64_t(g) * hd + c;
      ks[i] = r < nk ? k[src] : 0.0f;
      vs[i] = r < nk ? v[src] : 0.0f;
    }
    __syncthreads();
    // Scores, masked: key k0 + j is visible to query t0 + r when k0 + j ≤ pos(r).
    for (int i = threadIdx.x; i < kQ * kK; i += blockDim.x) {
      const int r = i / kK, j = i % kK;
      float s = -INFINITY;
      if (r < nq && j < nk && k0 + j <= pos(r)) {
        float acc = 0.0f;
        for (int c = 0; c < hd; ++c) acc += qs[r * hd + c] * ks[j * hd + c];
        s = acc * scale;
      }
      p[i] = s;
    }
    __syncthreads();
    // Online softmax statistics, one thread per query row.
    if (threadIdx.x < kQ) {
      const int r = threadIdx.x;
      float mx = m[r];
      for (int j = 0; j < kK; ++j) mx = fmaxf(mx, p[r * kK + j]);
      float sum = 0.0f;
      for (int j = 0; j < kK; ++j) {
        const float s = p[r * kK + j];
        const float e = s == -INFINITY ? 0.0f : expf(s - mx);
        p[r * kK + j] = e;
        sum += e;
      }
      const float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
      corr[r] = c;
      l[r] = l[r] * c + sum;
      m[r] = mx;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kQ * hd; i += blockDim.x) {
      const int r = i / hd, c = i % hd;
      float acc = os[i] * corr[r];
      for (int j = 0; j < nk; ++j) acc += p[r * kK + j] * vs[j * hd + c];
      os[i] = acc;
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < nq * hd; i += blockDim.x) {
    const int r = i / hd, c = i % hd;
    out[int64_t(t0 + r) * q_ld + int64_t(h) * hd + c] = os[i] / l[r];
  }
}

}  // namespace

void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out) {
  if (d.T == 0) return;
  if (d.n_kv < d.T || d.Hkv <= 0 || d.H % d.Hkv != 0)
    throw std::invalid_argument("attention_causal: need n_kv >= T and H a multiple of Hkv");
  if (d.positions != nullptr && !d.positions_checked) {
    // The host's check on a host copy (T ints; the copy waits for the compute queued so far,
    // which wrote them): a kernel reading positions[t] past n_kv would read keys out of range.
    // Skipped when the caller checked them before the upload (AttentionDims::positions_checked).
    std::vector<int> host(static_cast<size_t>(d.T));
    check(cudaMemcpy(host.data(), d.positions, host.size() * sizeof(int), cudaMemcpyDeviceToHost),
          "cudaMemcpy D2H (attention_causal positions)");
    check_query_positions(host.data(), d.T, d.n_kv);
  }
  const size_t bytes = shared_bytes(d.hd);
  check(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(bytes)),
        "cudaFuncSetAttribute (attention shared memory)");
  const dim3 grid((d.T + kQ - 1) / kQ, d.H);
  attention_kernel<<<grid, kAttnThreads, bytes>>>(q, k, v, out, d.T, d.n_kv, d.H, d.Hkv, d.hd,
                                                  d.scale, d.positions);
  check_launch("attention_causal");
}

}  // namespace hypic::kernels::cuda
