#pragma once
// Causal softmax attention with grouped key/value heads, in query blocks whose scores and
// weighted values are BLAS matrix products. Implementation: kernels/host/attention.cpp.
#include <cstddef>

namespace hypic::kernels {

struct AttentionDims {
  int T = 0;     // new query tokens
  int n_kv = 0;  // keys/values visible in total (cached + new), n_kv ≥ T
  int H = 0;     // query heads
  int Hkv = 0;   // key/value heads; query head h reads kv head h / (H / Hkv)
  int hd = 0;    // head dim
  float scale = 1.0f;
  // Null: query t sits at n_kv − T + t (a contiguous block). Else (the backend's memory,
  // like the other arguments) query t sits at positions[t] (strictly ascending, each < n_kv) and
  // sees keys 0 … positions[t]: several blocks separated by cached keys at once (pic's junction
  // windows).
  const int* positions = nullptr;
  // The caller has already run check_query_positions on these positions while they were host
  // memory (model::set_query_positions does, before the upload). A device backend then skips
  // its own check, which copies them back to the host and waits for the stream on every call;
  // unset, it checks them itself (attention_checks.hpp).
  bool positions_checked = false;
  // Queries before this one need no output (the last layer of a block, where only the rows
  // whose logits are read go on): the host skips its blocks of queries that lie wholly before
  // it, so their out rows are left as they were; every query it computes is bit for bit what
  // the whole call computes. A device backend may compute them all.
  int first_query = 0;
};

// Floats of scratch attention_causal needs for these dims.
size_t attention_workspace_floats(const AttentionDims& d);

// q   : [T, H, hd]; query t sits at absolute position n_kv − T + t (or positions[t])
// k, v: [n_kv, Hkv, hd] at positions 0 … n_kv − 1
// out : [T, H, hd],  out = softmax(scale · q kᵀ + causal mask) · v
// work: attention_workspace_floats(d) floats
void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out, float* work);

// The softmax's exponential for x ≤ 0 (a vectorisable polynomial), exposed for its test.
float attention_exp(float x);

}  // namespace hypic::kernels
