// Qwen3.5 (text part of Qwen3_5ForConditionalGeneration, or Qwen3_5ForCausalLM): Gated
// DeltaNet + gated attention with dense MLPs. Published configs nest the text model under
// text_config (model_type qwen3_5_text) and store its weights under model.language_model.,
// next to a vision tower and MTP heads that hypic skips. The linear layers store in_proj as
// four tensors (qkv, z, b, a) already in canonical row order.
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

class Qwen3_5 final : public ArchSpec {
 public:
  const char* name() const override { return "qwen3_5"; }
  std::vector<std::string> model_types() const override { return {"qwen3_5", "qwen3_5_text"}; }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields top(root, "");
    std::string where;
    const json& text = text_model_fields(root, {"qwen3_5_text", "qwen3_5"}, where);
    const Fields f(text, where);
    read_hybrid_fields(f, top, c);
    read_layer_types(f, c);
    read_dense_mlp_width(f, c);
    read_token_ids(f, top, c);
  }

  // The composite layout of the published checkpoints (text part under text_config),
  // without a vision tower.
  json write_config(const ModelConfig& c) const override {
    json t = hybrid_fields_json(c);
    t["model_type"] = "qwen3_5_text";
    json root;
    root["model_type"] = "qwen3_5";
    root["architectures"] = json::array({"Qwen3_5ForCausalLM"});
    root["tie_word_embeddings"] = c.tie_word_embeddings;
    root["text_config"] = t;
    root["dtype"] = "float32";
    return root;
  }

  void validate(const ModelConfig& c) const override {
    HYPIC_REQUIRE(c.num_experts == 0,
                  "config: qwen3_5 text models have no experts (num_experts must be 0)");
  }

  bool layer_is_moe(const ModelConfig&, int) const override { return false; }

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

  // A nested config has two tie_word_embeddings flags; transformers' text-only class reads
  // the inner one and the multimodal class the outer one. When they disagree, the
  // checkpoint itself decides: lm_head.weight stored means untied.
  void adjust_loaded_config(const json& raw, const std::set<std::string>& tensors,
                            ModelConfig& c) const override {
    if (raw.contains("text_config") && raw.at("text_config").is_object() &&
        raw.value("tie_word_embeddings", json()).is_boolean() &&
        raw.at("text_config").value("tie_word_embeddings", json()).is_boolean() &&
        raw.at("tie_word_embeddings") != raw.at("text_config").at("tie_word_embeddings"))
      c.tie_word_embeddings = tensors.count("lm_head.weight") == 0;
  }

  // "large" (1.1 B parameters, 2.2 GB in bf16) is for loading and peak-memory checks
  // (scripts/weights_peak_memory.sh), not for computing here.
  std::vector<std::string> preset_names() const override {
    return {"tiny", "small", "bench", "large"};
  }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    HybridSizes s{};
    if (preset == "tiny")
      s = {512, 64, 4, 128, 4, 2, 16, 2, 4, 16, 16, 10000.0, 4096};
    else if (preset == "small")
      s = {4096, 256, 8, 512, 4, 2, 64, 2, 4, 64, 64, 1e7, 32768};
    else if (preset == "large")
      s = {32000, 2048, 16, 6144, 16, 2, 128, 16, 32, 128, 128, 1e7, 32768};
    else  // bench
      s = {32000, 1024, 12, 2560, 8, 2, 128, 4, 8, 128, 128, 1e7, 32768};
    fill_hybrid_preset(s, c);
    c.tie_word_embeddings = true;  // Qwen3.5's smaller models tie lm_head to the embeddings
  }
};

}  // namespace

const ArchSpec& qwen3_5() {
  static const Qwen3_5 spec;
  return spec;
}

}  // namespace hypic::model::arch
