// ModelConfig: derived quantities and generic checks; config.json itself is read and written
// by the model's architecture (src/model/arch/).
#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "hypic/error.hpp"
#include "hypic/kernels/moe.hpp"
#include "model/arch/common.hpp"

namespace hypic::model {

using nlohmann::json;

const char* arch_name(const ArchSpec* arch) {
  if (arch == nullptr) throw Error("config: no architecture set (internal error)");
  return arch->name();
}

const ArchSpec& ModelConfig::arch_spec() const {
  arch_name(arch);  // throws when none is set
  return *arch;
}

int ModelConfig::rotary_dim() const {
  return static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
}

bool ModelConfig::layer_is_moe(int layer) const {
  return arch_spec().layer_is_moe(*this, layer);
}

int ModelConfig::num_linear_layers() const {
  return static_cast<int>(std::count_if(layer_types.begin(), layer_types.end(), is_linear_kind));
}

int ModelConfig::num_full_layers() const {
  return static_cast<int>(layer_types.size()) - num_linear_layers();
}

std::string ModelConfig::layout_string() const {
  std::string s;
  const int group = full_attention_interval > 0 ? full_attention_interval : 4;
  for (size_t i = 0; i < layer_types.size(); ++i) {
    if (i > 0) s += (i % static_cast<size_t>(group) == 0) ? " | " : " ";
    s += is_linear_kind(layer_types[i]) ? "L" : "A";
  }
  return s;
}

ModelConfig ModelConfig::from_json(const json& root) {
  HYPIC_REQUIRE(root.is_object(), "config.json: expected a JSON object");
  const arch::Fields top(root, "");
  HYPIC_REQUIRE(top.has("model_type"), "config.json: missing required field 'model_type'");
  const std::string model_type = top.string("model_type", "");
  const ArchSpec* spec = arch_for_model_type(model_type);
  if (spec == nullptr)
    throw Error("config.json: unsupported model_type '" + model_type +
                "' (supported: " + supported_architectures() + ")");
  arch::check_size_fields(root);  // before read_config allocates per layer
  ModelConfig c;
  c.arch = spec;
  spec->read_config(root, c);
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  const ArchSpec& spec = arch_spec();
  auto positive = [](int v, const char* name) {
    HYPIC_REQUIRE(v > 0, std::string("config: ") + name + " must be positive (got " +
                             std::to_string(v) + ")");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(linear_num_key_heads, "linear_num_key_heads");
  positive(linear_num_value_heads, "linear_num_value_heads");
  positive(linear_key_head_dim, "linear_key_head_dim");
  positive(linear_value_head_dim, "linear_value_head_dim");
  positive(linear_conv_kernel_dim, "linear_conv_kernel_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  // An end-of-sequence id the model cannot produce would never stop generation.
  for (int id : eos_token_ids)
    HYPIC_REQUIRE(id >= 0 && id < vocab_size, "config: eos_token_id " + std::to_string(id) +
                                                  " is outside the vocabulary (0.." +
                                                  std::to_string(vocab_size - 1) + ")");
  // Products of sizes, in 64 bits, against the bounds of model/arch/common.hpp (presets and
  // configs alike: every int the layers derive from them then fits).
  arch::check_product(static_cast<int64_t>(num_hidden_layers), arch::kMaxLayers,
                      "num_hidden_layers");
  arch::check_product(static_cast<int64_t>(num_experts), arch::kMaxExperts, "num_experts");
  for (const auto& [value, limit, what] :
       {std::tuple<int64_t, int64_t, const char*>{vocab_size, arch::kMaxVocab, "vocab_size"},
        {hidden_size, arch::kMaxWidth, "hidden_size"},
        {intermediate_size, arch::kMaxWidth, "intermediate_size"},
        {moe_intermediate_size, arch::kMaxWidth, "moe_intermediate_size"},
        {shared_expert_intermediate_size, arch::kMaxWidth, "the shared experts' width"},
        {static_cast<int64_t>(num_attention_heads) * head_dim, arch::kMaxWidth,
         "num_attention_heads x head_dim"},
        {static_cast<int64_t>(num_key_value_heads) * head_dim, arch::kMaxWidth,
         "num_key_value_heads x head_dim"},
        {static_cast<int64_t>(linear_num_key_heads) * linear_key_head_dim, arch::kMaxWidth,
         "linear_num_key_heads x linear_key_head_dim"},
        {static_cast<int64_t>(linear_num_value_heads) * linear_value_head_dim, arch::kMaxWidth,
         "linear_num_value_heads x linear_value_head_dim"},
        {static_cast<int64_t>(num_attention_heads) * (qk_nope_head_dim + qk_rope_head_dim),
         arch::kMaxWidth, "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim)"},
        {static_cast<int64_t>(num_attention_heads) * (qk_nope_head_dim + v_head_dim),
         arch::kMaxWidth, "num_attention_heads x (qk_nope_head_dim + v_head_dim)"}})
    arch::check_product(value, limit, what);
  HYPIC_REQUIRE(rms_norm_eps > 0, "config: rms_norm_eps must be positive");
  HYPIC_REQUIRE(rope_theta > 0, "config: rope_theta must be positive");
  HYPIC_REQUIRE(static_cast<int>(layer_types.size()) == num_hidden_layers,
                "config: layer_types has " + std::to_string(layer_types.size()) +
                    " entries but num_hidden_layers is " + std::to_string(num_hidden_layers));
  HYPIC_REQUIRE(num_attention_heads % num_key_value_heads == 0,
                "config: num_attention_heads (" + std::to_string(num_attention_heads) +
                    ") must be a multiple of num_key_value_heads (" +
                    std::to_string(num_key_value_heads) + ")");
  HYPIC_REQUIRE(linear_num_value_heads % linear_num_key_heads == 0,
                "config: linear_num_value_heads (" + std::to_string(linear_num_value_heads) +
                    ") must be a multiple of linear_num_key_heads (" +
                    std::to_string(linear_num_key_heads) + ")");
  const int rot = rotary_dim();
  // Only softmax attention (gated or plain) and Ring's linear layers rotate q and k; MLA
  // (kimi_linear: mla_use_nope), KDA, Gated DeltaNet and lightning layers use no RoPE, so a
  // model made of those alone (a kimi_linear config without MLA layers) needs no rotary part.
  const bool uses_rope = std::any_of(layer_types.begin(), layer_types.end(), [](LayerKind k) {
    return k == LayerKind::FullAttention || k == LayerKind::RingLinear;
  });
  HYPIC_REQUIRE(!uses_rope || (partial_rotary_factor > 0 && partial_rotary_factor <= 1 &&
                               rot >= 2 && rot % 2 == 0),
                "config: head_dim * partial_rotary_factor must be an even number >= 2 (got " +
                    std::to_string(head_dim) + " * " + std::to_string(partial_rotary_factor) + ")");
  spec.validate(*this);
  if (num_experts > 0) {
    HYPIC_REQUIRE(num_experts_per_tok > 0 && num_experts_per_tok <= num_experts &&
                      num_experts_per_tok <= kernels::kMoeCombineMaxK,
                  "config: num_experts_per_tok must be between 1 and num_experts (" +
                      std::to_string(num_experts) + ") and at most " +
                      std::to_string(kernels::kMoeCombineMaxK) + ", got " +
                      std::to_string(num_experts_per_tok));
    positive(moe_intermediate_size, "moe_intermediate_size");
    HYPIC_REQUIRE(shared_expert_intermediate_size >= 0,
                  "config: shared_expert_intermediate_size must be >= 0 (0: no shared expert)");
    HYPIC_REQUIRE(
        moe_scoring == "softmax" || moe_scoring == "sigmoid",
        "config: the router's scoring must be softmax or sigmoid, got \"" + moe_scoring + "\"");
    HYPIC_REQUIRE(moe_n_group >= 1 && moe_topk_group >= 1 && moe_topk_group <= moe_n_group &&
                      num_experts % moe_n_group == 0,
                  "config: n_group must divide the number of experts and 1 <= topk_group <= "
                  "n_group (got n_group " +
                      std::to_string(moe_n_group) + ", topk_group " +
                      std::to_string(moe_topk_group) + ")");
    HYPIC_REQUIRE(moe_n_group == 1 || moe_scoring == "sigmoid",
                  "config: expert groups (n_group > 1) need sigmoid routing");
    HYPIC_REQUIRE(moe_routed_scaling_factor > 0, "config: routed_scaling_factor must be > 0");
    positive(decoder_sparse_step, "decoder_sparse_step");
  }
  for (int l : mlp_only_layers)
    HYPIC_REQUIRE(l >= 0 && l < num_hidden_layers, "config: mlp_only_layers holds layer " +
                                                       std::to_string(l) + ", outside 0.." +
                                                       std::to_string(num_hidden_layers - 1));
  for (int i = 0; i < num_hidden_layers; ++i) {
    if (!layer_is_moe(i)) {
      positive(intermediate_size, "intermediate_size");
      break;
    }
  }
}

int64_t context_positions(int64_t prompt_tokens, int64_t new_tokens) {
  return prompt_tokens + std::max<int64_t>(new_tokens - 1, 0);
}

std::string context_overflow(const ModelConfig& cfg, int64_t prompt_tokens, int64_t new_tokens) {
  const int64_t context = cfg.max_position_embeddings;
  const int64_t positions = context_positions(prompt_tokens, new_tokens);
  if (positions <= context) return "";
  std::string why = "the prompt has " + std::to_string(prompt_tokens) + " tokens";
  if (new_tokens > 0)
    why += " and up to " + std::to_string(new_tokens) + " new ones, which need " +
           std::to_string(positions) + " positions,";
  return why + (new_tokens > 0 ? "" : ",") + " more than the model's context of " +
         std::to_string(context) + " positions (max_position_embeddings)";
}

json ModelConfig::to_json() const {
  return arch_spec().write_config(*this);
}

}  // namespace hypic::model
