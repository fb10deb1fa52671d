#pragma once
// MiniMax's lightning attention layer (MiniMax-Text-01 / M1, transformers'
// MiniMaxLightningAttention): per head h a linear-attention state S ∈ R^{hd×hd} with a constant
// decay e^{−slope_h} per token, no erase and no q scaling (the "lightning" member of the
// linear family, kernels::Member::Lightning):
//   q, k, v = silu(qkv_proj(x)) split per head as [q | k | v]
//   S_t = e^{−slope_h} S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ q_t
//   y = out_proj(sigmoid(output_gate(x)) · rms_norm(o over all heads))
// The transition of a segment of n tokens is the scalar e^{−n·slope_h} per head, so a segment
// entry stores one number per head for T (docs/linear-family.md §3).
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/cache.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"
#include "model/weights.hpp"

namespace hypic::model {

// slope_h = 2^(−8(h+1)/H) · (1 − layer/(L − 1 + 1e−5) + 1e−5) for h < H = num_attention_heads,
// L = num_hidden_layers: the rate ALiBi uses, weakened towards the last layer (transformers'
// MiniMaxLightningAttention.get_slope_rate). Rounded to f32 as transformers keeps it.
std::vector<float> lightning_slopes(const ModelConfig& cfg, int layer);

// The layer over spans (after may be null), as gdn_layer: reads and advances cache.state
// [H, hd, hd] span by span; with cache.capture_transition set, cache.transition [H] (host or
// the backend's memory, as the state) is multiplied by each block's e^{−n·slope_h}.
// One span of a scalar-decay linear-attention layer (MiniMax's and Ring's lightning layers):
// the family kernel into `out`, and, while the cache captures transitions, its per-head T
// (block_t, H floats of workspace) multiplied into cache.transition.
void scalar_decay_block(const kernels::Backend& be, const kernels::FamilySpec& spec,
                        const kernels::FamilyDims& dims, const kernels::FamilyInputs& in,
                        LayerCache& cache, float* out, float* block_t, Workspace& ws);

void lightning_layer(const kernels::Backend& be, const ModelConfig& cfg, int layer,
                     const LightningWeights& w, const float* x, float* out, const Span* spans,
                     int n_spans, LayerCache& cache, Workspace& ws, const AfterSpan* after,
                     int first_out = 0);

}  // namespace hypic::model
