#pragma once
// Model hyper-parameters read from a Hugging Face config.json. What an architecture's
// config.json holds is decided by its ArchSpec (src/model/arch/); this struct is the union of
// the fields the layers read. Implementation: src/model/config.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/arch/arch.hpp"

namespace hypic::model {

// Gated DeltaNet / (gated) softmax attention / MiniMax lightning attention
// (model/layers_lightning.hpp) / Ring-linear's lightning attention (bailing_moe_linear: scalar
// decay per head, RoPE on q and k, no conv; model/layers_ring.hpp) / kimi_linear's KDA (Kimi
// Delta Attention, the delta rule with per-channel gates) and MLA (multi-head latent attention).
enum class LayerKind { Linear, FullAttention, Lightning, RingLinear, Kda, Mla };
// Whether a layer kind keeps a recurrent state (a linear-attention layer: its PIC entry is a
// transition summary) rather than per-token K/V.
inline bool is_linear_kind(LayerKind k) {
  return k == LayerKind::Linear || k == LayerKind::Lightning || k == LayerKind::RingLinear ||
         k == LayerKind::Kda;
}

// The architecture's name ("qwen3_next", "qwen3_5"); throws hypic::Error for nullptr.
const char* arch_name(const ArchSpec* arch);

struct ModelConfig {
  // The registered architecture this config belongs to (never owned; set by from_json and
  // preset_config).
  const ArchSpec* arch = nullptr;
  const ArchSpec& arch_spec() const;  // *arch; throws hypic::Error when none is set
  int vocab_size = 0;
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int intermediate_size = 0;  // dense MLP width (Qwen3.5; Qwen3-Next dense layers)
  double rms_norm_eps = 1e-6;
  // RMSNorm weights: zero-centred `(1 + w)` (Qwen3-Next, Qwen3.5) or plain `w` (false).
  bool zero_centred_norm = true;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<LayerKind> layer_types;  // one per layer
  int full_attention_interval = 4;

  // Gated full attention.
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.25;

  // Gated DeltaNet (linear attention).
  int linear_num_key_heads = 0;
  int linear_num_value_heads = 0;
  int linear_key_head_dim = 0;
  int linear_value_head_dim = 0;
  int linear_conv_kernel_dim = 4;

  // Mixture of experts (num_experts == 0 means dense everywhere; the architecture decides
  // which layers are MoE).
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;
  int decoder_sparse_step = 1;
  bool norm_topk_prob = true;
  // Routing (kernels::MoeRouteSpec): "softmax" (Qwen, MiniMax) or "sigmoid" (DeepSeek-V3 style:
  // Kimi-Linear, Ring, with a selection bias tensor and expert groups); weights times
  // moe_routed_scaling_factor. shared_expert_intermediate_size == 0: no shared expert.
  std::string moe_scoring = "softmax";
  int moe_n_group = 1;
  int moe_topk_group = 1;
  double moe_routed_scaling_factor = 1.0;
  std::vector<int> mlp_only_layers;

  // MiniMax (minimax): Mixtral-style softmax attention (no output gate, no q/k norms),
  // lightning attention layers (LayerKind::Lightning, num_attention_heads × head_dim, one
  // constant decay per head), and residuals taken from the normed stream ("postnorm"):
  // h ← alpha · norm(h) + beta · layer(norm(h)), alpha/beta per layer kind and for the MLP.
  bool attention_output_gate = true;
  bool attention_qk_norm = true;
  bool residual_from_norm = false;
  double linear_attn_alpha = 1.0, linear_attn_beta = 1.0;
  double full_attn_alpha = 1.0, full_attn_beta = 1.0;
  double mlp_alpha = 1.0, mlp_beta = 1.0;
  int lightning_block_size = 256;  // transformers' chunk length (no effect on the result)
  // bailing_moe_linear (Ring-linear). Its linear layers use num_attention_heads / head_dim
  // (MHA) and no conv; the arch mirrors them into the linear_* fields (conv kernel 1).
  int layer_group_size = 0;  // every layer_group_size-th layer (and the tail) is full attention
  int group_norm_size = 1;   // groups of the linear layers' output RMSNorm (g_norm)
  bool linear_silu = false;  // SiLU on the linear layers' q/k/v projections
  bool use_qk_norm = true;   // plain RMSNorm on q and k (both attention kinds)
  int first_k_dense_replace = 0;  // layers below this one have a dense MLP
  // kimi_linear. KDA layers use the linear_* fields (key heads = value heads = num_heads,
  // key dim = value dim = head_dim; conv channels q|k|v). MLA layers: the latent KV of
  // kv_lora_rank plus the decoupled key of qk_rope_head_dim; with the up-projection absorbed
  // into the queries the cached key row is the latent [normed c_kv | k_rope], so for these
  // models num_key_value_heads = 1 and head_dim = kv_lora_rank + qk_rope_head_dim describe
  // the cache (one latent "head"), and no RoPE is applied (mla_use_nope: rotary_dim() = 0).
  int kv_lora_rank = 0;
  int q_lora_rank = 0;  // 0: q_proj straight from the hidden state
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  // Token ids from config.json, when given (-1 / empty otherwise). Informational.
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;

  // Derived quantities.
  int rotary_dim() const;  // head_dim * partial_rotary_factor (even)
  int linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
  bool layer_is_moe(int layer) const;  // asks the architecture
  int num_linear_layers() const;
  int num_full_layers() const;
  // Layer layout in groups of full_attention_interval, e.g. "L L L A | L L L A".
  std::string layout_string() const;

  // Parses config.json content with the architecture its model_type names; throws
  // hypic::Error naming the offending field (or listing the supported model types).
  static ModelConfig from_json(const nlohmann::json& j);
  // Writes a config.json that transformers loads for this architecture.
  nlohmann::json to_json() const;
  // Throws hypic::Error when the sizes are inconsistent (e.g. value heads not a
  // multiple of key heads).
  void validate() const;
};

// The one rule for the model's context, used by every command: every token the model runs
// needs a position below max_position_embeddings: the prompt's, and each generated token's
// but the last (which is only picked, never fed back). context_positions() counts them;
// context_overflow() returns "" when they fit, else the reason in words.
int64_t context_positions(int64_t prompt_tokens, int64_t new_tokens);
std::string context_overflow(const ModelConfig& cfg, int64_t prompt_tokens, int64_t new_tokens);

}  // namespace hypic::model
