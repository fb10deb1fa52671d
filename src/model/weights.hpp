#pragma once
// Model weights in one canonical in-memory layout, whatever the checkpoint's architecture.
// Everything is f32 except the projection matrices (projection_matrices()), which may be kept
// in bf16 as a bf16 checkpoint stores them (half the memory); layers multiply through
// Backend::linear(x, Tensor, ...), which dispatches on the dtype. Every projection is stored as
// Hugging Face stores nn.Linear: [out_features, in_features], so y = x · Wᵀ.
#include <string>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/tensor.hpp"
#include "model/config.hpp"
#include "model/layers_kda.hpp"
#include "model/layers_mla.hpp"
#include "model/layers_ring.hpp"

namespace hypic::model {

// Gated DeltaNet layer. Qwen3-Next's per-key-head grouped in_proj_qkvz / in_proj_ba are
// permuted at load time into the flat order Qwen3.5 uses, so the forward pass sees one
// layout for both architectures.
struct GdnWeights {
  // Rows: q (Hk*dk) | k (Hk*dk) | v (Hv*dv) | z (Hv*dv) | b (Hv) | a (Hv).
  // The first conv_dim = 2*Hk*dk + Hv*dv rows are the conv1d channels, in order.
  Tensor in_proj;   // [conv_dim + Hv*dv + 2*Hv, hidden]
  Tensor conv1d;    // [conv_dim, K] depthwise causal kernel, no bias
  Tensor dt_bias;   // [Hv]
  Tensor A_log;     // [Hv]
  Tensor norm;      // [dv] gated RMSNorm weight (plain, not zero-centred)
  Tensor out_proj;  // [hidden, Hv*dv]
};

// Gated softmax attention.
struct AttentionWeights {
  // [H*hd*2, hidden]; per head the rows are [query (hd) | gate (hd)]; without an output gate
  // (ModelConfig::attention_output_gate false) [H*hd, hidden]
  Tensor q_proj;
  Tensor k_proj;  // [Hkv*hd, hidden]
  Tensor v_proj;  // [Hkv*hd, hidden]
  Tensor o_proj;  // [hidden, H*hd]
  Tensor q_norm;  // [hd] RMSNorm weight (empty without q/k norms)
  Tensor k_norm;  // [hd] RMSNorm weight (empty without q/k norms)
};

// MiniMax lightning attention (model/layers_lightning.hpp): H = num_attention_heads heads of
// head_dim hd; its per-head decay comes from the config, not from a weight.
struct LightningWeights {
  Tensor qkv_proj;     // [H*3*hd, hidden]; per head the rows are [q (hd) | k (hd) | v (hd)]
  Tensor output_gate;  // [H*hd, hidden]
  Tensor norm;         // [H*hd] plain RMSNorm weight over all heads
  Tensor out_proj;     // [hidden, H*hd]
};

// SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct MlpWeights {
  Tensor gate_up;  // [2*I, hidden]: gate rows then up rows
  Tensor down;     // [hidden, I]
};

struct MoeWeights {
  Tensor router;                    // [E, hidden]
  Tensor router_bias;               // [E] selection bias (sigmoid routing), or empty
  std::vector<MlpWeights> experts;  // E experts of width moe_intermediate_size
  MlpWeights shared_expert;         // width shared_expert_intermediate_size (0: none)
  Tensor shared_expert_gate;        // [1, hidden], or empty: the shared expert is ungated
};

struct LayerWeights {
  LayerKind kind = LayerKind::Linear;
  Tensor input_norm;           // [hidden] (zero-centred where cfg.zero_centred_norm)
  Tensor post_attn_norm;       // [hidden] (likewise)
  GdnWeights linear;           // when kind == Linear
  AttentionWeights attn;       // when kind == FullAttention (Qwen's gated attention)
  LightningWeights lightning;  // when kind == Lightning
  // bailing_moe_linear: kind RingLinear, or FullAttention when ring.qkv is not empty.
  RingAttentionWeights ring;
  KdaWeights kda;  // when kind == Kda
  MlaWeights mla;  // when kind == Mla
  bool is_moe = false;
  MlpWeights mlp;  // when !is_moe
  MoeWeights moe;  // when is_moe
};

struct ModelWeights {
  Tensor embed;  // [V, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden] zero-centred
  Tensor lm_head;     // [V, hidden]; empty when tie_word_embeddings (then embed is used)

  const Tensor& output_matrix() const { return lm_head.empty() ? embed : lm_head; }
  size_t parameter_count() const;
  size_t bytes() const;  // in memory, each tensor in its own dtype
};

// The matrices the products read (projections, experts, embedding, lm_head): the tensors that
// may be bf16. Empty ones (absent in this layer kind) are left out.
std::vector<Tensor*> projection_matrices(ModelWeights& w);
// projection_matrices and the other matrices the layers read through Backend::linear (KDA's,
// lightning's, MLA's q/kv_a/o, Ring's qkv/g_proj/dense): what a backend with
// tensor_core_products() receives in bf16 (Ring's linear layers read an f32 dense, the host's,
// per norm group by gemm). Left out, read by f32 gemms: MLA's kv_b_proj (absorbed per head).
std::vector<Tensor*> linear_matrices(ModelWeights& w);

// The f32 elements of a weight or cache tensor in its own memory (host, or a backend's device
// memory): what the layers hand to backend ops. Throws hypic::Error for another dtype.
const float* f32(const Tensor& t);
float* f32(Tensor& t);

// The weights moved into the memory of `backend`: returned as they are for the host backend,
// every tensor uploaded once for a device backend (a Model computes where its weights live).
// A backend with tensor_core_products() (the CUDA backend by default) gets every matrix of
// linear_matrices() in bf16: bf16 ones as stored, f32 ones rounded to nearest even here, once.
ModelWeights to_backend(ModelWeights weights, const kernels::Backend& backend);

}  // namespace hypic::model
