// Config-only model summaries (see config_info.hpp).
#include "model/config_info.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "hypic/error.hpp"
#include "model/arch/common.hpp"
#include "model/config.hpp"
#include "model/presets.hpp"

namespace hypic::model {
namespace {

using nlohmann::json;
constexpr uint64_t kStoreBytes = 2;  // bf16, the store's default dtype

// An architecture hypic runs: the loader's own layout gives the parameters.
ConfigSummary runnable(const json& root) {
  const ModelConfig c = ModelConfig::from_json(root);
  ConfigSummary s;
  s.model_type = root.value("model_type", "");
  s.architecture = c.arch_spec().name();
  s.runnable = true;
  const bool kimi = std::any_of(c.layer_types.begin(), c.layer_types.end(), [](LayerKind k) {
    return k == LayerKind::Mla || k == LayerKind::Kda;  // kimi_linear, with or without MLA
  });
  s.linear_kind = kimi ? "KDA" : "Gated DeltaNet";
  s.full_kind = kimi ? "MLA" : "gated attention";
  s.layers = c.num_hidden_layers;
  s.linear_layers = c.num_linear_layers();
  s.full_layers = c.num_full_layers();
  s.total_parameters = config_parameter_count(c);
  s.embedding_parameters =
      static_cast<uint64_t>(c.vocab_size) * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
  s.active_parameters = config_active_parameter_count(c);
  // K and V per KV head; MLA caches one latent row (kv_lora_rank + qk_rope_head_dim) that
  // serves as keys and values (model/layers_mla.hpp).
  const uint64_t kv = (kimi ? 1ull : 2ull) * c.num_key_value_heads * c.head_dim;
  s.kv_bytes_per_token = kv * s.full_layers * kStoreBytes;
  const uint64_t Hv = c.linear_num_value_heads, dk = c.linear_key_head_dim,
                 dv = c.linear_value_head_dim;
  s.entry_bytes_per_token = s.kv_bytes_per_token;
  if (std::count(c.layer_types.begin(), c.layer_types.end(), LayerKind::Lightning) > 0) {
    // MiniMax: lightning layers store T as one scalar per head, S, and no conv tail.
    s.linear_kind = "lightning attention";
    s.full_kind = "softmax attention";
    s.entry_fixed_bytes = (Hv + Hv * dk * dv) * s.linear_layers * kStoreBytes;
    s.entry_t_form = "one scalar per head (constant decay)";
    return s;
  }
  const uint64_t per_linear = Hv * dk * dk + Hv * dk * dv +
                              static_cast<uint64_t>(c.linear_conv_kernel_dim - 1) *
                                  static_cast<uint64_t>(c.linear_conv_dim());
  s.entry_fixed_bytes = per_linear * s.linear_layers * kStoreBytes;
  s.entry_bytes_per_token = s.kv_bytes_per_token;
  s.entry_t_form = kimi ? "dense dk x dk per head (delta rule with per-channel gates)"
                        : "dense dk x dk per value head (delta rule)";
  s.entry_t_bytes = Hv * dk * dk * s.linear_layers * kStoreBytes;
  s.entry_s_bytes = Hv * dk * dv * s.linear_layers * kStoreBytes;
  s.entry_s_fp8_bytes = Hv * (dk + (dk * dv + 1) / 2) * s.linear_layers * kStoreBytes;
  if (kimi) {
    // Short KDA segments: T = diag(γ) − XᵀY, dk + 2·r·dk values per head (the rule of
    // pic::entry_t_structure: while that is smaller than dk², r ≤ dk/2 − 1).
    s.entry_lowrank_max_tokens = static_cast<int>(dk / 2) - 1;
    s.entry_lowrank_base_bytes =
        (per_linear - Hv * dk * dk + Hv * dk) * s.linear_layers * kStoreBytes;
    s.entry_lowrank_bytes_per_token = 2 * Hv * dk * s.linear_layers * kStoreBytes;
  }
  return s;
}

// Ring-linear (BailingMoeLinearV2ForCausalLM, remote code; runnable: src/model/arch/
// bailing_moe_linear.cpp, whose tensor layout gives the same total): every layer_group_size-th
// layer (and any tail past the last whole group) is GQA softmax attention, the others lightning
// linear attention (MHA, a constant decay per head, so T is one scalar per head); a dense
// MLP below first_k_dense_replace, MoE with shared experts above. Tensors per layer
// (names under model.layers.l.): linear attention.query_key_value [3·H·d, h],
// attention.dense [h, H·d], attention.g_proj [H·d, h], attention.g_norm [H·d],
// attention.query_layernorm / key_layernorm [d]; softmax attention.query_key_value
// [(H + 2·Hkv)·d, h], attention.dense [h, H·d], the two qk norms [d]; MoE mlp.gate [E, h]
// + expert bias [E], experts E × 3 [I, h], shared_experts 3 [S·Is, h].
ConfigSummary bailing_moe_linear(const json& root) {
  const arch::Fields f(root, "");
  ConfigSummary s;
  s.model_type = "bailing_moe_linear";
  s.architecture = "bailing_moe_linear";
  s.runnable = true;
  s.linear_kind = "lightning attention";
  s.full_kind = "softmax attention";
  const uint64_t h = static_cast<uint64_t>(f.integer("hidden_size"));
  const uint64_t V = static_cast<uint64_t>(f.integer("vocab_size"));
  s.layers = f.integer("num_hidden_layers");
  const int group = f.integer("layer_group_size");
  HYPIC_REQUIRE(group > 0, "config.json: field 'layer_group_size' must be positive");
  const uint64_t H = static_cast<uint64_t>(f.integer("num_attention_heads"));
  const uint64_t Hkv = static_cast<uint64_t>(f.integer("num_key_value_heads"));
  const uint64_t d = static_cast<uint64_t>(f.integer("head_dim", static_cast<int>(h / H)));
  const uint64_t linear_params = 3 * H * d * h + h * H * d + H * d * h + H * d + 2 * d;
  const uint64_t attn_params = (H + 2 * Hkv) * d * h + h * H * d + 2 * d;
  const uint64_t E = static_cast<uint64_t>(f.integer("num_experts"));
  const uint64_t k = static_cast<uint64_t>(f.integer("num_experts_per_tok"));
  const uint64_t I = static_cast<uint64_t>(f.integer("moe_intermediate_size"));
  const uint64_t S = static_cast<uint64_t>(f.integer("num_shared_experts", 0));
  const uint64_t Is =
      static_cast<uint64_t>(f.integer("moe_shared_expert_intermediate_size", static_cast<int>(I)));
  const uint64_t dense_I = static_cast<uint64_t>(f.integer("intermediate_size"));
  const int first_dense = f.integer("first_k_dense_replace", 0);
  const bool tied = f.boolean("tie_word_embeddings", false);
  const int whole_groups_end = s.layers / group * group;
  uint64_t total = V * h * (tied ? 1 : 2) + h, inactive = 0;
  for (int l = 0; l < s.layers; ++l) {
    const bool full = (l + 1) % group == 0 || l >= whole_groups_end;
    (full ? s.full_layers : s.linear_layers) += 1;
    total += 2 * h + (full ? attn_params : linear_params);
    if (l >= first_dense && E > 1) {
      total += E * h + E + E * 3 * h * I + 3 * h * S * Is;
      inactive += (E - k) * 3 * h * I;
    } else {
      total += 3 * h * dense_I;
    }
  }
  s.total_parameters = total;
  s.active_parameters = total - inactive;
  s.embedding_parameters = V * h * (tied ? 1 : 2);
  s.kv_bytes_per_token = 2 * Hkv * d * s.full_layers * kStoreBytes;
  s.entry_fixed_bytes = (H + H * d * d) * s.linear_layers * kStoreBytes;
  s.entry_bytes_per_token = s.kv_bytes_per_token;
  s.entry_t_form = "one scalar per head (constant decay)";
  return s;
}

}  // namespace

ConfigSummary summarize_config(const json& root) {
  HYPIC_REQUIRE(root.is_object(), "config.json: expected a JSON object");
  arch::check_size_fields(root);  // before any per-layer count
  const std::string type = arch::Fields(root, "").string("model_type", "");
  if (type == "bailing_moe_linear") return bailing_moe_linear(root);
  if (arch_for_model_type(type) == nullptr)
    throw Error("config.json: unsupported model_type '" + type +
                "' (supported: " + supported_architectures() + ")");
  return runnable(root);
}

}  // namespace hypic::model
