#pragma once
// The blocked causal attention both backends run: the one orchestration of query blocks, key
// steps, the ragged masking of junction windows and the stacking of grouped heads, written once
// and compiled by both compilers. The host (kernels/host/attention.cpp) runs each step with
// sgemm on one (kv head, query block) item per thread; the CUDA backend
// (kernels/cuda/attention.cu) runs the same steps for all kv heads at once as strided-batched
// cuBLAS products on tensor cores (bf16 × bf16, f32 accumulation) and one softmax kernel per
// step. Only the tile sizes differ (host: ~256 rows × 256 keys; device: ~4096 × 1024).
//
// For a block of queries [q0, q0 + nq) and kv head g, the rows are query-major, r = t·group + j
// (query q0 + t, head g·group + j), so the queries that see a key (those at or after its
// position: positions ascend) are a contiguous run of rows. The keys run in steps from 0 up to
// what the block's last query sees; a step meets only the rows from the block's first query at
// or after its first key, and row r sees visible_keys(position(q0 + t), j0, width) of them
// (≥ 1): scores S = scale · Q Kᵀ, then an online softmax (running max m and sum l per row; the
// accumulated values rescaled by exp(m_old − m_new) when m grows; the probabilities P of the
// visible keys, 0 past them), then acc += P V; at the end out = acc / l. Junction windows far
// apart in one block thus never multiply against keys none of them sees.
#include <algorithm>

#include "hypic/kernels/attention.hpp"

#if defined(__CUDACC__)
#define HYPIC_ATTN_HD __host__ __device__
#else
#define HYPIC_ATTN_HD
#endif

namespace hypic::kernels::attention_plan {

// Queries per block: about `rows` stacked rows (queries × heads per kv head), at least 16
// queries, at most T.
inline int query_block(const AttentionDims& d, int rows) {
  const int group = d.H / std::max(1, d.Hkv);
  return std::min(d.T, std::max(16, rows / std::max(1, group)));
}

// The absolute position of query t: positions[t], or past + t for a contiguous block
// (past = n_kv − T).
HYPIC_ATTN_HD inline int position(const int* positions, int past, int t) {
  return positions != nullptr ? positions[t] : past + t;
}

// Keys of the step [j0, j0 + width) that a query at `pos` ≥ j0 sees.
HYPIC_ATTN_HD inline int visible_keys(int pos, int j0, int width) {
  const int v = pos - j0 + 1;
  return v < width ? v : width;
}

// The key steps of the block [q0, q0 + nq): f(first, j0, width) for each step of `step` keys
// from key 0 up to what the block's last query sees; `first` is the block's first query (from
// 0) at or after key j0, so rows first·group … are the step's active rows. positions: a host
// array (or nullptr: contiguous at past + t).
template <class F>
void for_each_key_step(const int* positions, int past, int q0, int nq, int step, F&& f) {
  const int keys = position(positions, past, q0 + nq - 1) + 1;
  int first = 0;
  for (int j0 = 0; j0 < keys; j0 += step) {
    while (position(positions, past, q0 + first) < j0) ++first;
    f(first, j0, std::min(step, keys - j0));
  }
}

}  // namespace hypic::kernels::attention_plan
