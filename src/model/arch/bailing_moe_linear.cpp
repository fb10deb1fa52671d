// Ring-linear (inclusionAI Ring-mini-linear-2.0, Ring-flash-linear-2.0; model_type
// bailing_moe_linear, BailingMoeLinearV2ForCausalLM, remote code that transformers does not
// ship): lightning linear attention (RingLinear, model/layers_ring.hpp) with every
// layer_group_size-th layer, and every layer past the last whole group, a GQA softmax
// attention layer; plain RMSNorms; a dense SwiGLU MLP below first_k_dense_replace and a
// sigmoid-routed MoE (expert bias, grouped top-k, routed scaling) with ungated shared experts
// above. Formulas and sources: docs/model-reference.md §9; tensor names: docs/models.md.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "hypic/error.hpp"
#include "model/arch/arch.hpp"
#include "model/arch/common.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

// A config.json flag hypic does not implement: refused with the field's name when it differs
// from the value every published Ring-linear model has.
void require_flag(const Fields& f, const char* key, bool supported) {
  HYPIC_REQUIRE(f.boolean(key, supported) == supported,
                "config.json: field '" + f.path(key) + "' is " + (supported ? "false" : "true") +
                    "; bailing_moe_linear supports only " + (supported ? "true" : "false"));
}

void set_layer_types(ModelConfig& c) {
  c.layer_types.clear();
  const int g = c.layer_group_size;
  const int whole = g > 0 ? c.num_hidden_layers / g * g : 0;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    c.layer_types.push_back(g > 0 && ((i + 1) % g == 0 || i >= whole) ? LayerKind::FullAttention
                                                                      : LayerKind::RingLinear);
}

// The linear layers are MHA over the attention heads and have no conv: the linear_* fields
// the generic code reads (cache sizes, summaries) mirror them.
void mirror_linear_fields(ModelConfig& c) {
  c.linear_num_key_heads = c.linear_num_value_heads = c.num_attention_heads;
  c.linear_key_head_dim = c.linear_value_head_dim = c.head_dim;
  c.linear_conv_kernel_dim = 1;
  c.full_attention_interval = c.layer_group_size;
}

class BailingMoeLinear final : public ArchSpec {
 public:
  const char* name() const override { return "bailing_moe_linear"; }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields f(root, "");
    c.vocab_size = f.integer("vocab_size");
    c.hidden_size = f.integer("hidden_size");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
    c.zero_centred_norm = false;
    c.max_position_embeddings = f.integer("max_position_embeddings", 32768);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    const std::string act = f.string("hidden_act", "silu");
    HYPIC_REQUIRE(act == "silu",
                  "config.json: field 'hidden_act' is '" + act + "'; only 'silu' is supported");
    require_flag(f, "use_rmsnorm", true);
    require_flag(f, "use_bias", false);
    require_flag(f, "use_qkv_bias", false);
    require_flag(f, "norm_head", false);
    require_flag(f, "linear_silu", false);
    require_flag(f, "use_linear_silu", false);
    HYPIC_REQUIRE(!f.has("kv_lora_rank") && f.string("full_attention_type", "gqa") != "mla",
                  "config.json: MLA full-attention layers (kv_lora_rank / full_attention_type "
                  "'mla') are not supported by bailing_moe_linear; only GQA");

    c.num_attention_heads = f.integer("num_attention_heads");
    c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
    HYPIC_REQUIRE(c.num_attention_heads > 0,
                  "config.json: field 'num_attention_heads' must be positive");
    c.head_dim = f.integer("head_dim", c.hidden_size / c.num_attention_heads);
    c.rope_theta = f.number("rope_theta", 10000.0);
    c.partial_rotary_factor = f.number("partial_rotary_factor", 1.0);
    if (f.has("rope_scaling") && !f.at("rope_scaling").is_null()) {
      const json& rs = f.at("rope_scaling");
      HYPIC_REQUIRE(rs.is_object(), "config.json: field 'rope_scaling' must be an object or null");
      const Fields r(rs, "rope_scaling");
      const std::string type = r.string("rope_type", r.string("type", "default"));
      HYPIC_REQUIRE(type == "default",
                    "config.json: rope_type '" + type + "' is not supported (only 'default')");
    }
    c.use_qk_norm = f.boolean("use_qk_norm", false);
    c.group_norm_size = f.integer("group_norm_size", 1);
    c.layer_group_size = f.integer("layer_group_size");
    c.first_k_dense_replace = f.integer("first_k_dense_replace", 0);
    HYPIC_REQUIRE(c.layer_group_size > 0, "config.json: field 'layer_group_size' must be positive");
    set_layer_types(c);
    mirror_linear_fields(c);

    c.num_experts = f.integer("num_experts", 0);
    if (c.num_experts > 0) {
      c.num_experts_per_tok = f.integer("num_experts_per_tok");
      c.moe_intermediate_size = f.integer("moe_intermediate_size");
      c.norm_topk_prob = f.boolean("norm_topk_prob", true);
      const int shared = f.integer("num_shared_experts", 0);
      const int64_t shared_width =
          static_cast<int64_t>(shared) *
          f.integer("moe_shared_expert_intermediate_size", c.moe_intermediate_size);
      check_product(shared_width, kMaxWidth,
                    "num_shared_experts x moe_shared_expert_intermediate_size");
      c.shared_expert_intermediate_size = static_cast<int>(shared_width);
      c.moe_scoring = f.string("score_function", "softmax");
      const bool bias = f.boolean("moe_router_enable_expert_bias", false);
      HYPIC_REQUIRE(bias == (c.moe_scoring == "sigmoid"),
                    "config.json: field 'moe_router_enable_expert_bias' must be true exactly when "
                    "'score_function' is 'sigmoid' (as the published models pair them)");
      // n_group / topk_group 0 (or absent) mean no expert groups.
      c.moe_n_group = std::max(1, f.integer("n_group", 1));
      c.moe_topk_group = c.moe_n_group == 1 ? 1 : std::max(1, f.integer("topk_group", 1));
      c.moe_routed_scaling_factor = f.number("routed_scaling_factor", 1.0);
    }
    read_dense_mlp_width(f, c);
    read_token_ids(f, f, c);
  }

  json write_config(const ModelConfig& c) const override {
    json t;
    t["model_type"] = "bailing_moe_linear";
    t["architectures"] = json::array({"BailingMoeLinearV2ForCausalLM"});
    t["vocab_size"] = c.vocab_size;
    t["hidden_size"] = c.hidden_size;
    t["intermediate_size"] = c.intermediate_size;
    t["num_hidden_layers"] = c.num_hidden_layers;
    t["layer_group_size"] = c.layer_group_size;
    t["num_attention_heads"] = c.num_attention_heads;
    t["num_key_value_heads"] = c.num_key_value_heads;
    t["head_dim"] = c.head_dim;
    t["partial_rotary_factor"] = c.partial_rotary_factor;
    t["rope_theta"] = c.rope_theta;
    t["rope_scaling"] = nullptr;
    t["rms_norm_eps"] = c.rms_norm_eps;
    t["use_qk_norm"] = c.use_qk_norm;
    t["group_norm_size"] = c.group_norm_size;
    t["linear_silu"] = false;
    t["use_bias"] = false;
    t["use_qkv_bias"] = false;
    t["use_rmsnorm"] = true;
    t["norm_head"] = false;
    t["hidden_act"] = "silu";
    t["first_k_dense_replace"] = c.first_k_dense_replace;
    t["num_experts"] = c.num_experts;
    if (c.num_experts > 0) {
      t["num_experts_per_tok"] = c.num_experts_per_tok;
      t["moe_intermediate_size"] = c.moe_intermediate_size;
      t["norm_topk_prob"] = c.norm_topk_prob;
      t["num_shared_experts"] = c.shared_expert_intermediate_size > 0 ? 1 : 0;
      t["moe_shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
      t["score_function"] = c.moe_scoring;
      t["moe_router_enable_expert_bias"] = c.moe_scoring == "sigmoid";
      t["n_group"] = c.moe_n_group;
      t["topk_group"] = c.moe_topk_group;
      t["routed_scaling_factor"] = c.moe_routed_scaling_factor;
    }
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    t["max_position_embeddings"] = c.max_position_embeddings;
    t["num_nextn_predict_layers"] = 0;
    if (c.bos_token_id >= 0) t["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) t["eos_token_id"] = c.eos_token_ids;
    t["torch_dtype"] = "float32";
    return t;
  }

  void validate(const ModelConfig& c) const override {
    HYPIC_REQUIRE(c.layer_group_size > 0, "config: layer_group_size must be positive");
    // The decay of linear layer l is scaled by 1 − (l − 1)/(num_hidden_layers − 1).
    HYPIC_REQUIRE(c.num_hidden_layers >= 2,
                  "config: bailing_moe_linear needs at least 2 layers (its linear layers' decay "
                  "divides by num_hidden_layers - 1)");
    const int inner = c.num_attention_heads * c.head_dim;
    HYPIC_REQUIRE(c.group_norm_size > 0 && inner % c.group_norm_size == 0,
                  "config: group_norm_size (" + std::to_string(c.group_norm_size) +
                      ") must divide num_attention_heads * head_dim (" + std::to_string(inner) +
                      ")");
  }

  bool layer_is_moe(const ModelConfig& c, int layer) const override {
    return c.num_experts > 0 && layer >= c.first_k_dense_replace;
  }

  std::vector<std::string> weight_prefixes() const override { return {"model."}; }
  // No Gated DeltaNet layers: RingLinear layers read attention.query_key_value.
  std::vector<InProjPart> linear_in_proj(const ModelConfig&) const override { return {}; }
  // Multi-token prediction layers (num_nextn_predict_layers > 0).
  std::vector<std::string> ignored_prefixes() const override { return {"model.mtp."}; }
  bool bailing_layout() const override { return true; }
  // mlp.gate.weight + mlp.gate.expert_bias (sigmoid routing), ungated mlp.shared_experts.
  MoeNames moe_names() const override {
    MoeNames n;
    n.router_bias = "gate.expert_bias";
    n.shared = "shared_experts.";
    n.shared_gate.clear();
    return n;
  }

  std::vector<std::string> preset_names() const override { return {"tiny", "small", "bench"}; }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    struct Sizes {
      int vocab, hidden, layers, group, intermediate, heads, kv_heads, head_dim, norm_groups;
      int experts, top_k, moe_intermediate, shared;
      double theta;
      int max_positions;
    };
    Sizes s{};
    if (preset == "tiny") {
      s = {512, 64, 6, 3, 96, 4, 2, 16, 2, 8, 2, 32, 32, 10000.0, 4096};
    } else if (preset == "small") {
      s = {4096, 256, 10, 5, 512, 8, 2, 32, 4, 16, 4, 64, 64, 1e6, 32768};
    } else {  // bench: Ring-mini proportions, scaled down
      s = {32000, 1024, 10, 5, 2560, 8, 2, 128, 4, 32, 4, 256, 256, 1e6, 32768};
    }
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.num_hidden_layers = s.layers;
    c.layer_group_size = s.group;
    c.intermediate_size = s.intermediate;
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.partial_rotary_factor = 0.5;
    c.rope_theta = s.theta;
    c.rms_norm_eps = 1e-6;
    c.zero_centred_norm = false;
    c.max_position_embeddings = s.max_positions;
    c.use_qk_norm = true;
    c.group_norm_size = s.norm_groups;
    c.first_k_dense_replace = 1;
    c.tie_word_embeddings = false;
    c.num_experts = s.experts;
    c.num_experts_per_tok = s.top_k;
    c.moe_intermediate_size = s.moe_intermediate;
    c.shared_expert_intermediate_size = s.shared;
    c.norm_topk_prob = true;
    c.moe_scoring = "sigmoid";
    c.moe_n_group = 4;
    c.moe_topk_group = 2;
    c.moe_routed_scaling_factor = 2.5;
    set_layer_types(c);
    mirror_linear_fields(c);
  }
};

}  // namespace

const ArchSpec& bailing_moe_linear() {
  static const BailingMoeLinear spec;
  return spec;
}

}  // namespace hypic::model::arch
