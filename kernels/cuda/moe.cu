// Mixture-of-experts bookkeeping on the device: routing (one block per token), grouping the
// (token, slot) pairs by expert (a stable counting sort: count, scan, then one block per expert
// writing its pairs in ascending order), and the gather / weighted scatter around the expert
// products. The expert products themselves are cuBLAS GEMMs over each expert's rows.
#include <stdexcept>
#include <string>

#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

// Block per token. Softmax over E, then k rounds of an argmax over the experts not yet taken
// (ties: lower index), as the host's repeated scans. taken: E bytes of dynamic shared memory.
__global__ void moe_route_kernel(const float* logits, int E, int k, bool norm_topk, int* experts,
                                 float* weights) {
  extern __shared__ unsigned char taken[];
  __shared__ float red[32];
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  const float* lt = logits + int64_t(blockIdx.x) * E;
  int* et = experts + int64_t(blockIdx.x) * k;
  float* wt = weights + int64_t(blockIdx.x) * k;

  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    mx = fmaxf(mx, lt[e]);
    taken[e] = 0;
  }
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  float part = 0.0f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) part += expf(lt[e] - mx);
  const float sum = block_sum(part, red);

  float chosen_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    int bi = -1;
    float bv = 0.0f;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      if (!taken[e] && (bi < 0 || lt[e] > bv)) bi = e, bv = lt[e];  // e ascending per thread
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) {
        const int oi = best_i[threadIdx.x + stride];
        const float ov = best_v[threadIdx.x + stride];
        const int ci = best_i[threadIdx.x];
        const float cv = best_v[threadIdx.x];
        if (oi >= 0 && (ci < 0 || ov > cv || (ov == cv && oi < ci))) {
          best_i[threadIdx.x] = oi;
          best_v[threadIdx.x] = ov;
        }
      }
      __syncthreads();
    }
    const int best = best_i[0];
    const float w = expf(lt[best] - mx) / sum;
    chosen_sum += w;
    if (threadIdx.x == 0) {
      taken[best] = 1;
      et[j] = best;
      wt[j] = w;
    }
    __syncthreads();
  }
  if (norm_topk && threadIdx.x == 0)
    for (int j = 0; j < k; ++j) wt[j] /= chosen_sum;
}

// Block per token, sigmoid scoring (DeepSeek-V3 style; MoeRouteSpec in moe.hpp): the block
// computes p = sigmoid(logit) and choice = p + bias into shared memory, then one thread makes
// the selection by the same scans as the host (groups, then experts; ties: lower index). The
// serial part is O(E·k) per token, small next to the expert products.
__global__ void moe_route_sigmoid_kernel(const float* logits, const float* bias, int E, int k,
                                         int n_group, int topk_group, bool norm_topk, float scale,
                                         int* experts, float* weights) {
  extern __shared__ float smem[];
  float* p = smem;                                                        // [E]
  float* choice = smem + E;                                               // [E]
  unsigned char* taken = reinterpret_cast<unsigned char*>(smem + 2 * E);  // [E]
  const float* lt = logits + int64_t(blockIdx.x) * E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    p[e] = 1.0f / (1.0f + expf(-lt[e]));
    choice[e] = bias != nullptr ? p[e] + bias[e] : p[e];
    taken[e] = 0;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int* et = experts + int64_t(blockIdx.x) * k;
  float* wt = weights + int64_t(blockIdx.x) * k;
  if (n_group > 1) {
    const int per = E / n_group;
    unsigned long long kept_mask[64] = {};  // n_group <= E <= 4096 bits
    for (int j = 0; j < topk_group; ++j) {
      int best = -1;
      float best_score = 0.0f;
      for (int g = 0; g < n_group; ++g) {
        if (kept_mask[g / 64] >> (g % 64) & 1ull) continue;
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; ++e) {
          if (choice[e] > b1) {
            b2 = b1;
            b1 = choice[e];
          } else if (choice[e] > b2) {
            b2 = choice[e];
          }
        }
        const float score = b1 + b2;
        if (best < 0 || score > best_score) best = g, best_score = score;
      }
      kept_mask[best / 64] |= 1ull << (best % 64);
    }
    for (int e = 0; e < E; ++e) taken[e] = !(kept_mask[(e / per) / 64] >> ((e / per) % 64) & 1ull);
  }
  float chosen_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
    taken[best] = 1;
    et[j] = best;
    wt[j] = p[best];
    chosen_sum += p[best];
  }
  for (int j = 0; j < k; ++j) {
    if (norm_topk) wt[j] /= chosen_sum + 1e-20f;
    if (scale != 1.0f) wt[j] *= scale;
  }
}

// Multiplies the [T, k] weights by the routing scale (softmax routing with a scale).
__global__ void scale_kernel(float* w, int64_t n, float scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) w[i] *= scale;
}

// Block per expert: how many pairs chose it.
__global__ void moe_count_kernel(const int* experts, int64_t pairs, int* count) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  int n = 0;
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) n += experts[i] == int(blockIdx.x);
  atomicAdd(&total, n);
  __syncthreads();
  if (threadIdx.x == 0) count[blockIdx.x] = total;
}

// One thread: start = exclusive scan of count (E ≤ a few thousand).
__global__ void moe_scan_kernel(const int* count, int E, int* start) {
  int acc = 0;
  for (int e = 0; e < E; ++e) {
    start[e] = acc;
    acc += count[e];
  }
  start[E] = acc;
}

// Block per expert: its pairs in ascending pair order, a tile of blockDim pairs at a time,
// each tile's positions from a shared-memory prefix count.
__global__ void moe_fill_kernel(const int* experts, int64_t pairs, const int* start,
                                int* pair_ids) {
  __shared__ int flag[kThreads];
  int base = start[blockIdx.x];
  for (int64_t t0 = 0; t0 < pairs; t0 += blockDim.x) {
    const int64_t i = t0 + threadIdx.x;
    const int mine = i < pairs && experts[i] == int(blockIdx.x);
    flag[threadIdx.x] = mine;
    __syncthreads();
    // Inclusive scan (Hillis-Steele) of the flags.
    for (int o = 1; o < int(blockDim.x); o *= 2) {
      const int add = threadIdx.x >= unsigned(o) ? flag[threadIdx.x - o] : 0;
      __syncthreads();
      flag[threadIdx.x] += add;
      __syncthreads();
    }
    if (mine) pair_ids[base + flag[threadIdx.x] - 1] = int(i);
    const int tile_total = flag[blockDim.x - 1];
    __syncthreads();
    base += tile_total;
  }
}

__global__ void moe_gather_kernel(const float* x, int hidden, const int* pair_ids, int n, int k,
                                  float* xe) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(n) * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  xe[i] = x[int64_t(pair_ids[r] / k) * hidden + c];
}

// A token appears at most once among one expert's pairs; the atomic keeps a caller's list that
// mixes experts correct too.
__global__ void moe_scatter_add_kernel(const float* ye, int hidden, const int* pair_ids, int n,
                                       int k, const float* weights, float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(n) * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  const int p = pair_ids[r];
  atomicAdd(out + int64_t(p / k) * hidden + c, weights[p] * ye[i]);
}

// work[pair_ids[r]] = r: the row of every pair.
__global__ void moe_rows_kernel(const int* pair_ids, int64_t pairs, int* work) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r < pairs) work[pair_ids[r]] = static_cast<int>(r);
}

// One block per (token, column slice): the token's k rows sorted ascending in shared memory
// (expert order, as the host adds them), then each thread adds its columns' k terms in that
// order. Grid (T, column slices).
__global__ void moe_combine_kernel(const float* ye, int hidden, int k, const float* weights,
                                   const int* work, float* out) {
  __shared__ int rows[kMoeCombineMaxK];
  __shared__ float wts[kMoeCombineMaxK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int j = 0; j < k; ++j) {  // insertion sort of k ≤ 64 rows
      const int r = work[t * k + j];
      const float wt = weights[t * k + j];
      int i = j;
      for (; i > 0 && rows[i - 1] > r; --i) {
        rows[i] = rows[i - 1];
        wts[i] = wts[i - 1];
      }
      rows[i] = r;
      wts[i] = wt;
    }
  }
  __syncthreads();
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  float o = out[t * hidden + c];
  for (int i = 0; i < k; ++i) o += wts[i] * ye[int64_t(rows[i]) * hidden + c];
  out[t * hidden + c] = o;
}

}  // namespace

void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
               float* weights) {
  check_route_spec(s, bias != nullptr);
  if (T == 0) return;
  const int E = s.experts, k = s.top_k;
  if (s.scoring == RouteScoring::Softmax) {
    moe_route_kernel<<<T, kThreads, E>>>(logits, E, k, s.norm_topk, experts, weights);
    check_launch("moe_route");
    if (s.scale != 1.0f) {
      const int64_t n = int64_t(T) * k;
      scale_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads>>>(weights, n, s.scale);
      check_launch("moe_route (scale)");
    }
    return;
  }
  const size_t shared = size_t(E) * (2 * sizeof(float) + 1);
  moe_route_sigmoid_kernel<<<T, kThreads, shared>>>(logits, bias, E, k, s.n_group, s.topk_group,
                                                    s.norm_topk, s.scale, experts, weights);
  check_launch("moe_route (sigmoid)");
}

void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids, int* work) {
  if (E <= 0) return;
  const int64_t pairs = int64_t(T) * k;
  moe_count_kernel<<<E, kThreads>>>(experts, pairs, work);
  check_launch("moe_group count");
  moe_scan_kernel<<<1, 1>>>(work, E, start);
  check_launch("moe_group scan");
  if (pairs == 0) return;
  moe_fill_kernel<<<E, kThreads>>>(experts, pairs, start, pair_ids);
  check_launch("moe_group fill");
}

void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k, float* xe) {
  const int64_t total = int64_t(n) * hidden;
  if (total == 0) return;
  moe_gather_kernel<<<blocks_for(total), kThreads>>>(x, hidden, pair_ids, n, k, xe);
  check_launch("moe_gather");
}

void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                     const float* weights, float* out) {
  const int64_t total = int64_t(n) * hidden;
  if (total == 0) return;
  moe_scatter_add_kernel<<<blocks_for(total), kThreads>>>(ye, hidden, pair_ids, n, k, weights, out);
  check_launch("moe_scatter_add");
}

void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                 const float* weights, float* out, int* work) {
  if (k < 1 || k > kMoeCombineMaxK)
    throw Error("moe_combine: experts per token must be 1 to " + std::to_string(kMoeCombineMaxK) +
                ", not " + std::to_string(k));
  const int64_t pairs = int64_t(T) * k;
  if (pairs == 0 || hidden == 0) return;
  moe_rows_kernel<<<blocks_for(pairs), kThreads>>>(pair_ids, pairs, work);
  check_launch("moe_combine (rows)");
  const dim3 grid(static_cast<unsigned>(T),
                  static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  moe_combine_kernel<<<grid, kThreads>>>(ye, hidden, k, weights, work, out);
  check_launch("moe_combine");
}

}  // namespace hypic::kernels::cuda
