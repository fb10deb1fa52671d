// Causal attention with grouped key/value heads on tensor cores: the steps of
// attention_plan.hpp (the orchestration the host backend runs too) with every kv head of a step
// at once. Per call, q, k and v are packed once into per-kv-head panels ([Hkv, T·group, hd]
// with rows query-major as the plan stacks them; [Hkv, n_kv, hd]) in bf16 (HYPIC_CUDA_GEMM=f32:
// in f32); per key step of a query block, one strided-batched cuBLAS product S = scale·Q Kᵀ
// (f32 accumulation and output), one kernel for the masked online softmax (one block per row:
// running max and sum, rescaled accumulator, probabilities P rounded to the product type), one
// strided-batched product acc += P V; at the end one kernel writes out = acc / l in [T, H, hd].
// Scratch (stream-ordered pool): the panels, and per block S, P, acc, m, l.
#include <cuda_bf16.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "hypic/kernels/attention_checks.hpp"
#include "hypic/kernels/attention_plan.hpp"
#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {
namespace plan = attention_plan;
constexpr int kRows = 4096;  // stacked query rows per block (queries × heads per kv head)
constexpr int kKeys = 1024;  // keys per step

__device__ inline void store(float* p, float v) {
  *p = v;
}
__device__ inline void store(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

// dst[g][(t·group + j)·hd + c] = src[t][(g·group + j)·hd + c]: [n, Hx·group, hd] → per kv head
// panels [Hx, n·group, hd] (group = 1: K and V, [n_kv, Hkv, hd] → [Hkv, n_kv, hd]).
template <class T>
__global__ void pack_kernel(const float* src, int64_t n, int Hx, int group, int hd, T* dst) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t heads = int64_t(Hx) * group;
  if (i >= n * heads * hd) return;
  const int c = static_cast<int>(i % hd);
  const int64_t rest = i / hd;
  const int h = static_cast<int>(rest % heads);
  const int64_t t = rest / heads;
  const int g = h / group, j = h % group;
  store(dst + ((int64_t(g) * n + t) * group + j) * hd + c, src[i]);
}

// The online-softmax step for one row of one kv head (block (row − r0, g)): the row's visible
// scores → max, exponentials and sum; the accumulator rescaled; P (0 past the visible keys).
template <class T>
__global__ void softmax_step_kernel(const float* S, T* P, float* acc, float* m, float* l,
                                    int rows_max, int hd, int group, int q0, int r0, int j0,
                                    int width, const int* positions, int past) {
  __shared__ float red[32];
  const int row = r0 + blockIdx.x, g = blockIdx.y;
  const int64_t at = int64_t(g) * rows_max + row;
  const float* s = S + at * kKeys;
  T* p = P + at * kKeys;
  const int pos = plan::position(positions, past, q0 + row / group);
  const int visible = plan::visible_keys(pos, j0, width);
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < visible; c += blockDim.x) mx = fmaxf(mx, s[c]);
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  const float m_old = m[at];
  const float m_new = fmaxf(m_old, mx);
  const float rescale = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {
    const float e = c < visible ? expf(s[c] - m_new) : 0.0f;
    store(p + c, e);
    sum += e;
  }
  sum = block_sum(sum, red);
  float* a = acc + at * hd;
  if (rescale != 1.0f)
    for (int c = threadIdx.x; c < hd; c += blockDim.x) a[c] *= rescale;
  if (threadIdx.x == 0) {
    l[at] = l[at] * rescale + sum;
    m[at] = m_new;
  }
}

__global__ void init_rows_kernel(float* acc, float* m, float* l, int64_t rows, int hd) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < rows * hd) acc[i] = 0.0f;
  if (i < rows) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
}

// out[q0 + t][(g·group + j)·hd + c] = acc[g][t·group + j][c] / l[g][t·group + j].
__global__ void finish_kernel(const float* acc, const float* l, float* out, int nq, int q0, int Hkv,
                              int group, int hd, int rows_max) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t heads = int64_t(Hkv) * group;
  if (i >= int64_t(nq) * heads * hd) return;
  const int c = static_cast<int>(i % hd);
  const int64_t rest = i / hd;
  const int h = static_cast<int>(rest % heads);
  const int t = static_cast<int>(rest / heads);
  const int g = h / group, j = h % group;
  const int64_t at = int64_t(g) * rows_max + int64_t(t) * group + j;
  out[(int64_t(q0) + t) * heads * hd + int64_t(h) * hd + c] = acc[at * hd + c] / l[at];
}

template <class T>
void pack(const float* src, int64_t n, int Hx, int group, int hd, T* dst) {
  const int64_t total = n * Hx * group * hd;
  if (total == 0) return;
  pack_kernel<T><<<blocks_for(total), kThreads>>>(src, n, Hx, group, hd, dst);
  check_launch("attention_causal (pack)");
}

// The steps of attention_plan in element type T (bf16 on tensor cores, or f32).
template <class T>
void run(const AttentionDims& d, const float* q, const float* k, const float* v, float* out,
         const int* host_positions, cudaDataType_t type) {
  const int group = d.H / d.Hkv, hd = d.hd, past = d.n_kv - d.T;
  const int bq = plan::query_block(d, kRows);
  const int rows_max = bq * group;
  Scratch qp(sizeof(T) * size_t(d.T) * d.H * hd), kp(sizeof(T) * size_t(d.n_kv) * d.Hkv * hd),
      vp(sizeof(T) * size_t(d.n_kv) * d.Hkv * hd);
  pack(q, d.T, d.Hkv, group, hd, qp.as<T>());
  pack(k, d.n_kv, d.Hkv, 1, hd, kp.as<T>());
  pack(v, d.n_kv, d.Hkv, 1, hd, vp.as<T>());
  const int64_t slab = int64_t(d.Hkv) * rows_max;  // rows of all kv heads in a block
  Scratch S(sizeof(float) * size_t(slab) * kKeys), P(sizeof(T) * size_t(slab) * kKeys),
      acc(sizeof(float) * size_t(slab) * hd), m(sizeof(float) * size_t(slab)),
      l(sizeof(float) * size_t(slab));
  const float zero = 0.0f, one = 1.0f;
  cublasHandle_t h = cublas_handle();
  for (int q0 = 0; q0 < d.T; q0 += bq) {
    const int nq = std::min(bq, d.T - q0);
    init_rows_kernel<<<blocks_for(slab * hd), kThreads>>>(acc.as<float>(), m.as<float>(),
                                                          l.as<float>(), slab, hd);
    check_launch("attention_causal (init)");
    plan::for_each_key_step(host_positions, past, q0, nq, kKeys, [&](int first, int j0, int width) {
      const int r0 = first * group, active = nq * group - r0;
      const T* qrows = qp.as<T>() + (int64_t(q0) * group + r0) * hd;
      // S[g][r0 …, 0:width] = scale · Q_g Kᵀ (row-major; column-major: Sᵀ = K Q_gᵀ).
      check(cublasGemmStridedBatchedEx(
                h, CUBLAS_OP_T, CUBLAS_OP_N, width, active, hd, &d.scale,
                kp.as<T>() + int64_t(j0) * hd, type, hd, int64_t(d.n_kv) * hd, qrows, type, hd,
                int64_t(d.T) * group * hd, &zero, S.as<float>() + int64_t(r0) * kKeys, CUDA_R_32F,
                kKeys, int64_t(rows_max) * kKeys, d.Hkv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx (attention scores)");
      check_launch("cublasGemmStridedBatchedEx (attention scores)");
      softmax_step_kernel<T><<<dim3(active, d.Hkv), kThreads>>>(
          S.as<float>(), P.as<T>(), acc.as<float>(), m.as<float>(), l.as<float>(), rows_max, hd,
          group, q0, r0, j0, width, d.positions, past);
      check_launch("attention_causal (softmax step)");
      // acc[g][r0 …] += P[g][r0 …, 0:width] · V_g[j0 …] (column-major: accᵀ += Vᵀ Pᵀ).
      check(cublasGemmStridedBatchedEx(
                h, CUBLAS_OP_N, CUBLAS_OP_N, hd, active, width, &one, vp.as<T>() + int64_t(j0) * hd,
                type, hd, int64_t(d.n_kv) * hd, P.as<T>() + int64_t(r0) * kKeys, type, kKeys,
                int64_t(rows_max) * kKeys, &one, acc.as<float>() + int64_t(r0) * hd, CUDA_R_32F, hd,
                int64_t(rows_max) * hd, d.Hkv, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx (attention values)");
      check_launch("cublasGemmStridedBatchedEx (attention values)");
    });
    const int64_t total = int64_t(nq) * d.H * hd;
    finish_kernel<<<blocks_for(total), kThreads>>>(acc.as<float>(), l.as<float>(), out, nq, q0,
                                                   d.Hkv, group, hd, rows_max);
    check_launch("attention_causal (finish)");
  }
}

}  // namespace

void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out) {
  if (d.T == 0) return;
  if (d.n_kv < d.T || d.Hkv <= 0 || d.H % d.Hkv != 0)
    throw std::invalid_argument("attention_causal: need n_kv >= T and H a multiple of Hkv");
  // The plan walks the positions on the host: a host copy (T ints; the copy waits for the
  // compute queued so far, which wrote them), checked as the host checks them, since a kernel
  // reading positions[t] past n_kv would read keys out of range (not again where the caller
  // checked them before the upload: AttentionDims::positions_checked).
  std::vector<int> host;
  if (d.positions != nullptr) {
    host.resize(static_cast<size_t>(d.T));
    check(cudaMemcpy(host.data(), d.positions, host.size() * sizeof(int), cudaMemcpyDeviceToHost),
          "cudaMemcpy D2H (attention_causal positions)");
    if (!d.positions_checked) check_query_positions(host.data(), d.T, d.n_kv);
  }
  const int* positions = d.positions != nullptr ? host.data() : nullptr;
  if (tensor_cores_flag())
    run<__nv_bfloat16>(d, q, k, v, out, positions, CUDA_R_16BF);
  else
    run<float>(d, q, k, v, out, positions, CUDA_R_32F);
}

}  // namespace hypic::kernels::cuda
