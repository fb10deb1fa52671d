#pragma once
// The two attention kinds of Ring-linear (`bailing_moe_linear`; formulas and their public
// sources: docs/model-reference.md §9):
//  - RingLinear: lightning attention. Fused q|k|v projection (MHA), plain RMSNorm on q and k,
//    partial neox RoPE on q and k at absolute positions, q · hd^-½, then per head
//      S_t = e^{λ_h} S_{t−1} + k_t v_tᵀ,  o_t = S_tᵀ q_t        (λ_h < 0 fixed per layer/head)
//    then an RMSNorm over group_norm_size groups of the H·hd outputs, · sigmoid(g_proj x),
//    dense. The state S is [H, hd, hd] (LayerCache::state); T of a segment is e^{nλ_h}, one
//    scalar per head. Because k carries RoPE, a state built at offset 0 moves to offset p as
//    S ← R_p S (docs/linear-family.md §5; done by the PIC splice).
//  - Ring's softmax attention (a FullAttention layer with RingAttentionWeights): fused
//    q|k|v (GQA), plain q/k RMSNorm, partial neox RoPE, softmax · hd^-½, dense; no output
//    gate. Its K/V cache is the same as the gated attention's.
#include <cstdint>
#include <functional>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/tensor.hpp"

namespace hypic::model {

struct ModelConfig;
struct LayerCache;
struct Span;
class Workspace;
using AfterSpan = std::function<void(int span, LayerCache& cache)>;

// Weights of either Ring attention kind (checkpoint names under model.layers.<l>.attention.).
struct RingAttentionWeights {
  Tensor qkv;     // query_key_value [(H + 2·Hkv)·hd, hidden]: q rows | k rows | v rows
                  // (linear layers are MHA: Hkv = H)
  Tensor dense;   // [hidden, H·hd]
  Tensor q_norm;  // query_layernorm [hd], plain RMSNorm weight (when use_qk_norm)
  Tensor k_norm;  // key_layernorm [hd]
  Tensor g_proj;  // [H·hd, hidden] output gate (linear layers only)
  Tensor g_norm;  // [H·hd] group RMSNorm weight (linear layers only)
};

// The per-head log decay λ_h (< 0) of linear layer `layer` (its index in the decoder):
// −slope_h · (1 − (layer − 1)/(num_hidden_layers − 1) + 1e-5), slope_h the ALiBi slopes of
// num_attention_heads heads.
std::vector<float> ring_log_decay(const ModelConfig& cfg, int layer);

// Lightning attention over spans (see layers.hpp Span / AfterSpan; after may be null):
// out += layer(x). Advances cache.state; while cache.capture_transition is set, multiplies
// cache.transition ([H], one scalar per head) by the block's e^{nλ}.
void ring_linear_layer(const kernels::Backend& be, const ModelConfig& cfg, int layer,
                       const RingAttentionWeights& w, const float* x, float* out, const Span* spans,
                       int n_spans, LayerCache& cache, Workspace& ws, const AfterSpan* after,
                       int first_out = 0);

// Ring's softmax attention over spans: appends each span's K (normed, rotated) and V to cache.
void ring_attention_layer(const kernels::Backend& be, const ModelConfig& cfg,
                          const RingAttentionWeights& w, const float* x, float* out,
                          const Span* spans, int n_spans, LayerCache& cache, Workspace& ws,
                          const AfterSpan* after, int first_out = 0);

}  // namespace hypic::model
