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
  s.linear_kind = "Gated DeltaNet";
  s.full_kind = "gated attention";
  s.layers = c.num_hidden_layers;
  s.linear_layers = c.num_linear_layers();
  s.full_layers = c.num_full_layers();
  s.total_parameters = config_parameter_count(c);
  s.embedding_parameters =
      static_cast<uint64_t>(c.vocab_size) * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
  s.active_parameters = config_active_parameter_count(c);
  const uint64_t kv = 2ull * c.num_key_value_heads * c.head_dim;
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
  s.entry_t_form = "dense dk x dk per value head (delta rule)";
  return s;
}

// Kimi-Linear (KimiLinearForCausalLM, remote code): KDA layers and MLA layers listed 1-based
// in linear_attn_config, a dense MLP below first_k_dense_replace, MoE with shared experts
// above. The count follows the published checkpoint's tensors (docs/models.md):
//   KDA  q/k/v_proj [P, h], q/k/v_conv1d [P, 1, K], f_a/g_a [d, h], f_b/g_b [P, d],
//        b_proj [H, h], A_log [H], dt_bias [P], o_norm [d], o_proj [h, P]   (P = H·d)
//   MLA  q_proj [H·(nope+rope), h], kv_a_proj_with_mqa [r+rope, h], kv_a_layernorm [r],
//        kv_b_proj [H·(nope+v), r], o_proj [h, H·v]                         (r = kv_lora_rank)
//   MoE  experts E × 3 [I, h], gate [E, h] + e_score_correction_bias [E],
//        shared_experts 3 [S·I, h]
ConfigSummary kimi_linear(const json& root) {
  const arch::Fields f(root, "");
  ConfigSummary s;
  s.model_type = "kimi_linear";
  s.architecture = "kimi_linear";
  s.linear_kind = "KDA";
  s.full_kind = "MLA";
  const uint64_t h = static_cast<uint64_t>(f.integer("hidden_size"));
  const uint64_t V = static_cast<uint64_t>(f.integer("vocab_size"));
  s.layers = f.integer("num_hidden_layers");
  HYPIC_REQUIRE(f.has("linear_attn_config") && f.at("linear_attn_config").is_object(),
                "config.json: missing required field 'linear_attn_config'");
  const arch::Fields la(f.at("linear_attn_config"), "linear_attn_config");
  const std::vector<int> full = la.int_list("full_attn_layers");
  const std::vector<int> kda = la.int_list("kda_layers");
  s.full_layers = static_cast<int>(full.size());
  s.linear_layers = static_cast<int>(kda.size());
  HYPIC_REQUIRE(s.full_layers + s.linear_layers == s.layers,
                "config.json: linear_attn_config lists " +
                    std::to_string(s.full_layers + s.linear_layers) +
                    " layers but num_hidden_layers is " + std::to_string(s.layers));
  const uint64_t H = static_cast<uint64_t>(la.integer("num_heads"));
  const uint64_t d = static_cast<uint64_t>(la.integer("head_dim"));
  const uint64_t K = static_cast<uint64_t>(la.integer("short_conv_kernel_size", 4));
  const uint64_t P = H * d;
  const uint64_t kda_params =
      3 * P * h + 3 * P * K + 2 * (d * h + P * d) + H * h + H + P + d + h * P;

  const uint64_t Ha = static_cast<uint64_t>(f.integer("num_attention_heads"));
  const uint64_t nope = static_cast<uint64_t>(f.integer("qk_nope_head_dim"));
  const uint64_t rope = static_cast<uint64_t>(f.integer("qk_rope_head_dim"));
  const uint64_t vh = static_cast<uint64_t>(f.integer("v_head_dim"));
  const uint64_t r = static_cast<uint64_t>(f.integer("kv_lora_rank"));
  HYPIC_REQUIRE(!f.has("q_lora_rank"),
                "config.json: a q_lora_rank is not counted (Kimi-Linear has none)");
  const uint64_t mla_params =
      Ha * (nope + rope) * h + (r + rope) * h + r + Ha * (nope + vh) * r + h * Ha * vh;

  const uint64_t E = static_cast<uint64_t>(f.integer("num_experts"));
  const uint64_t k = static_cast<uint64_t>(f.integer("num_experts_per_token"));
  const uint64_t I = static_cast<uint64_t>(f.integer("moe_intermediate_size"));
  const uint64_t S = static_cast<uint64_t>(f.integer("num_shared_experts", 0));
  const uint64_t dense_I = static_cast<uint64_t>(f.integer("intermediate_size"));
  const int first_dense = f.integer("first_k_dense_replace", 0);
  const int freq = f.integer("moe_layer_freq", 1);
  const uint64_t expert = 3 * h * I;
  const uint64_t moe_params = E * expert + E * h + E + S * expert;
  uint64_t total = V * h * (f.boolean("tie_word_embeddings", false) ? 1 : 2) + h;
  uint64_t inactive = 0;
  for (int l = 0; l < s.layers; ++l) {
    total += 2 * h;  // input and post-attention norms
    const bool is_full = std::find(full.begin(), full.end(), l + 1) != full.end();
    total += is_full ? mla_params : kda_params;
    if (l >= first_dense && freq > 0 && (l - first_dense) % freq == 0) {
      total += moe_params;
      inactive += (E - k) * expert;
    } else {
      total += 3 * h * dense_I;
    }
  }
  s.total_parameters = total;
  s.active_parameters = total - inactive;
  s.embedding_parameters = V * h * (f.boolean("tie_word_embeddings", false) ? 1 : 2);
  // MLA caches the latent (kv_lora_rank) and the decoupled RoPE key per token and layer.
  s.kv_bytes_per_token = (r + rope) * s.full_layers * kStoreBytes;
  s.entry_fixed_bytes = (H * d * d + H * d * d + (K - 1) * 3 * P) * s.linear_layers * kStoreBytes;
  s.entry_bytes_per_token = s.kv_bytes_per_token;
  s.entry_t_form = "dense dk x dk per head (delta rule with per-channel gates)";
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
  const std::string type = arch::Fields(root, "").string("model_type", "");
  if (type == "kimi_linear") return kimi_linear(root);
  if (type == "bailing_moe_linear") return bailing_moe_linear(root);
  if (arch_for_model_type(type) == nullptr)
    throw Error("config.json: unsupported model_type '" + type +
                "' (supported: " + supported_architectures() + "; config only: kimi_linear)");
  return runnable(root);
}

}  // namespace hypic::model
