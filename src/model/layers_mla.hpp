#pragma once
// MLA (multi-head latent attention, kimi_linear's full-attention layers), as Kimi-Linear runs
// it: no RoPE anywhere (mla_use_nope; transformers' KimiLinearAttention applies no rotary
// embedding), so every cached row is position independent. Per token:
//   c = rmsnorm(x · kv_a[:r]ᵀ) (eps 1e-6),  k_rope = x · kv_a[r:]ᵀ   (latent KV, r = kv_lora_rank)
//   q_h = [q_nope_h | q_rope_h] from q_proj (or q_b(rmsnorm(q_a(x))) with a q_lora_rank)
//   k_h = [W_uk_h c | k_rope], v_h = W_uv_h c   (kv_b_proj rows per head: [W_uk_h ; W_uv_h])
//   out += o_proj( softmax(q_h·k_h / sqrt(nope + rope)) v_h ).
// It runs with the up-projection absorbed: the query becomes [W_uk_hᵀ q_nope_h | q_rope_h] and
// attends, as multi-query attention with one head of width r + rope, to the cached latent rows
// [c | k_rope], whose first r columns also serve as the values; W_uv_h maps the result back.
// The cache holds only those rows (cache.k [n, 1, r + rope]; cache.v stays empty).
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

struct MlaWeights {
  Tensor q_proj;     // [H·(nope+rope), hidden]; empty with a q_lora_rank
  Tensor q_a_proj;   // [q_lora_rank, hidden]  (with a q_lora_rank)
  Tensor q_a_norm;   // [q_lora_rank]          plain RMSNorm weight, eps 1e-6
  Tensor q_b_proj;   // [H·(nope+rope), q_lora_rank]
  Tensor kv_a_proj;  // [r + rope, hidden]  (kv_a_proj_with_mqa)
  Tensor kv_a_norm;  // [r] plain RMSNorm weight, eps 1e-6
  Tensor kv_b_proj;  // [H·(nope+v), r]; per head nope rows of W_uk then v rows of W_uv
  Tensor o_proj;     // [hidden, H·v]
};

// The RMSNorm epsilon of the latent norms (transformers builds them with its default, not
// with rms_norm_eps).
constexpr double kMlaLatentNormEps = 1e-6;

// One MLA layer over spans (see layers.hpp; after may be null): queries at their absolute
// positions attend causally to the cached latent rows and to their own span's; appends each
// span's rows to cache.k (cache.kv_tokens() must equal the span's position).
void mla_layer(const kernels::Backend& be, const ModelConfig& cfg, const MlaWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const std::function<void(int, LayerCache&)>* after,
               int first_out = 0);

}  // namespace hypic::model
