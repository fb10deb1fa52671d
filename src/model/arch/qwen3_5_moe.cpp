// Qwen3.5 MoE (Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B; Qwen3_5MoeForConditionalGeneration
// or Qwen3_5MoeForCausalLM): Qwen3.5's Gated DeltaNet + gated attention with a routed
// mixture of experts plus a gated shared expert in every layer (transformers'
// Qwen3_5MoeSparseMoeBlock: softmax router, top-k renormalised, no dense layers, so no
// decoder_sparse_step / mlp_only_layers / norm_topk_prob). Published configs nest the text
// model under text_config (model_type qwen3_5_moe_text); weights sit under
// model.language_model. next to a vision tower and MTP heads that hypic skips. Experts are
// stored fused, as transformers keeps them: mlp.experts.gate_up_proj [E, 2I, H] (gate rows
// then up rows) and mlp.experts.down_proj [E, H, I].
#include <nlohmann/json.hpp>

#include "hypic/error.hpp"
#include "model/arch/arch.hpp"
#include "model/arch/common.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

std::vector<int64_t> iota_rows(int64_t begin, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = begin + i;
  return r;
}

class Qwen3_5Moe final : public ArchSpec {
 public:
  const char* name() const override { return "qwen3_5_moe"; }
  std::vector<std::string> model_types() const override {
    return {"qwen3_5_moe", "qwen3_5_moe_text"};
  }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields top(root, "");
    std::string where;
    const json& text = text_model_fields(root, {"qwen3_5_moe_text", "qwen3_5_moe"}, where);
    const Fields f(text, where);
    read_hybrid_fields(f, top, c);
    c.num_experts = f.integer("num_experts");
    HYPIC_REQUIRE(c.num_experts > 0, "config.json: field '" + f.path("num_experts") +
                                         "' must be positive (qwen3_5_moe has experts in "
                                         "every layer)");
    c.num_experts_per_tok = f.integer("num_experts_per_tok");
    c.moe_intermediate_size = f.integer("moe_intermediate_size");
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size");
    // transformers' router always renormalises the top-k probabilities and makes every
    // layer MoE, whatever norm_topk_prob / decoder_sparse_step / mlp_only_layers say.
    c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers.clear();
    read_layer_types(f, c);
    read_dense_mlp_width(f, c);
    read_token_ids(f, top, c);
  }

  // The composite layout of the published checkpoints (text part under text_config),
  // without a vision tower.
  json write_config(const ModelConfig& c) const override {
    json t = hybrid_fields_json(c);
    t.erase("intermediate_size");  // no dense MLP anywhere
    t["model_type"] = "qwen3_5_moe_text";
    t["num_experts"] = c.num_experts;
    t["num_experts_per_tok"] = c.num_experts_per_tok;
    t["moe_intermediate_size"] = c.moe_intermediate_size;
    t["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    json root;
    root["model_type"] = "qwen3_5_moe";
    root["architectures"] = json::array({"Qwen3_5MoeForCausalLM"});
    root["tie_word_embeddings"] = c.tie_word_embeddings;
    root["text_config"] = t;
    root["dtype"] = "float32";
    return root;
  }

  void validate(const ModelConfig& c) const override {
    HYPIC_REQUIRE(c.num_experts > 0,
                  "config: qwen3_5_moe has experts in every layer (num_experts must be positive)");
  }

  bool layer_is_moe(const ModelConfig& c, int) const override { return c.num_experts > 0; }

  // Published checkpoints: model.language_model.; the text-only class saves under model.
  std::vector<std::string> weight_prefixes() const override {
    return {"model.language_model.", "model."};
  }

  std::vector<InProjPart> linear_in_proj(const ModelConfig& c) const override {
    const int64_t conv = c.linear_conv_dim(), vd = c.linear_value_dim();
    const int64_t Hv = c.linear_num_value_heads;
    return {{"in_proj_qkv.weight", iota_rows(0, conv)},
            {"in_proj_z.weight", iota_rows(conv, vd)},
            {"in_proj_b.weight", iota_rows(conv + vd, Hv)},
            {"in_proj_a.weight", iota_rows(conv + vd + Hv, Hv)}};
  }

  // Multi-token prediction heads and the vision tower.
  std::vector<std::string> ignored_prefixes() const override {
    return {"mtp.", "model.visual.", "model.mtp."};
  }

  // transformers has no per-expert form of this model: its checkpoints hold fused stacks.
  bool saves_fused_experts() const override { return true; }

  // As Qwen3.5: when the two tie_word_embeddings flags disagree, lm_head.weight decides.
  void adjust_loaded_config(const json& raw, const std::set<std::string>& tensors,
                            ModelConfig& c) const override {
    if (raw.contains("text_config") && raw.at("text_config").is_object() &&
        raw.value("tie_word_embeddings", json()).is_boolean() &&
        raw.at("text_config").value("tie_word_embeddings", json()).is_boolean() &&
        raw.at("tie_word_embeddings") != raw.at("text_config").at("tie_word_embeddings"))
      c.tie_word_embeddings = tensors.count("lm_head.weight") == 0;
  }

  std::vector<std::string> preset_names() const override { return {"tiny", "small", "bench"}; }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    struct Moe {
      int experts, top_k, moe_intermediate, shared_intermediate;
    };
    HybridSizes s{};
    Moe m{};
    if (preset == "tiny") {
      s = {512, 64, 4, 0, 4, 2, 16, 2, 4, 16, 16, 10000.0, 4096};
      m = {8, 2, 32, 32};
    } else if (preset == "small") {
      s = {4096, 256, 8, 0, 4, 2, 64, 2, 4, 64, 64, 1e7, 32768};
      m = {16, 4, 64, 64};
    } else {  // bench
      s = {32000, 1024, 12, 0, 8, 2, 128, 4, 8, 128, 128, 1e7, 32768};
      m = {32, 4, 256, 256};
    }
    fill_hybrid_preset(s, c);
    c.tie_word_embeddings = false;  // the published MoE checkpoints keep a separate lm_head
    c.num_experts = m.experts;
    c.num_experts_per_tok = m.top_k;
    c.moe_intermediate_size = m.moe_intermediate;
    c.shared_expert_intermediate_size = m.shared_intermediate;
    c.decoder_sparse_step = 1;
    c.norm_topk_prob = true;
  }
};

}  // namespace

const ArchSpec& qwen3_5_moe() {
  static const Qwen3_5Moe spec;
  return spec;
}

}  // namespace hypic::model::arch
