#pragma once
// KDA (Kimi Delta Attention, kimi_linear's linear layers): the delta rule with a decay per key
// channel (kernels::Member::KDA: S_t = (I − β_t k_t k_tᵀ) diag(e^{g_t}) S_{t−1} + β_t k_t v_tᵀ).
// Per layer (P = H·d, key heads = value heads = H, head dim d):
//   q|k|v = x · qkvᵀ → depthwise causal conv1d (K taps, no bias) + SiLU → q, k L2-normalised
//   (eps 1e-6 under the root), q · d^-½;
//   g = −exp(A_log_h) · softplus(f_b(f_a(x)) + dt_bias)  per channel (the low-rank forget gate);
//   β = sigmoid(b_proj(x)) per head;
//   out += o_proj( w_o · rmsnorm(o) · sigmoid(g_b(g_a(x))) )  per head (RMSNorm eps rms_norm_eps).
// The cache is the Gated DeltaNet one (state [H, d, d], conv tail [K−1, 3P], transition), so
// PIC composes KDA segments with the same dense T (MATH.md §2), or, for a short segment, with
// its exact WY form diag(γ) − XᵀY (cache.capture_lowrank; pic/segment_entry.hpp).
#include <functional>

#include "hypic/tensor.hpp"

namespace hypic::kernels {
class Backend;
}

namespace hypic::model {

struct ModelConfig;
struct LayerCache;
struct Span;
class Workspace;

struct KdaWeights {
  Tensor qkv;      // [3P, hidden]: q_proj rows, k_proj rows, v_proj rows
  Tensor conv1d;   // [3P, K]: q_conv1d, k_conv1d, v_conv1d (the conv channels, in order)
  Tensor f_a;      // [d, hidden]  forget gate, low rank
  Tensor f_b;      // [P, d]
  Tensor A_log;    // [P]: the checkpoint's A_log [H] repeated per channel of each head
  Tensor dt_bias;  // [P]
  Tensor b_proj;   // [H, hidden]
  Tensor g_a;      // [d, hidden]  output gate, low rank
  Tensor g_b;      // [P, d]
  Tensor o_norm;   // [d] plain RMSNorm weight
  Tensor o_proj;   // [hidden, P]
};

// One KDA layer over spans (see layers.hpp Span / AfterSpan; after may be null): x and out hold
// spans[n_spans−1].end rows; out += layer(x). Advances cache.state and cache.conv (and
// cache.transition when cache.capture_transition is set; with cache.capture_lowrank, one block
// of at most 64 tokens leaves the WY factors in transition / transition_x / transition_y).
void kda_layer(const kernels::Backend& be, const ModelConfig& cfg, const KdaWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const std::function<void(int, LayerCache&)>* after,
               int first_out = 0);

}  // namespace hypic::model
