// Qwen3-Next (Qwen3NextForCausalLM): Gated DeltaNet + gated attention, MoE MLPs with a
// shared expert. config.json is flat; the linear layers store in_proj as two grouped
// tensors (in_proj_qkvz, in_proj_ba) that loading permutes into the flat canonical layout.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/arch/arch.hpp"
#include "model/arch/common.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

// For each row r of the canonical in_proj ([q|k|v|z|b|a]), the row of the concatenation
// [in_proj_qkvz ; in_proj_ba] it comes from. Qwen3-Next groups the projections per key
// head: in_proj_qkvz holds, for each key head g, [q_g | k_g | v_g | z_g] (v and z covering
// that head's G = Hv/Hk value heads); in_proj_ba holds [b_g | a_g] per key head.
std::vector<int64_t> grouped_in_proj_rows(const ModelConfig& c) {
  const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t G = Hv / Hk;  // value heads per key head
  const int64_t kd = Hk * dk, vd = Hv * dv, conv = 2 * kd + vd;
  const int64_t group = 2 * dk + 2 * G * dv;  // rows of one key head's [q|k|v|z] block
  const int64_t qkvz_rows = Hk * group;
  std::vector<int64_t> src(static_cast<size_t>(conv + vd + 2 * Hv));
  auto set = [&](int64_t canonical, int64_t source) {
    src[static_cast<size_t>(canonical)] = source;
  };
  for (int64_t g = 0; g < Hk; ++g) {
    const int64_t base = g * group;
    for (int64_t i = 0; i < dk; ++i) {
      set(g * dk + i, base + i);            // q
      set(kd + g * dk + i, base + dk + i);  // k
    }
    for (int64_t i = 0; i < G * dv; ++i) {
      set(2 * kd + g * G * dv + i, base + 2 * dk + i);         // v
      set(conv + g * G * dv + i, base + 2 * dk + G * dv + i);  // z
    }
    for (int64_t j = 0; j < G; ++j) {
      set(conv + vd + g * G + j, qkvz_rows + g * 2 * G + j);           // b
      set(conv + vd + Hv + g * G + j, qkvz_rows + g * 2 * G + G + j);  // a
    }
  }
  return src;
}

class Qwen3Next final : public ArchSpec {
 public:
  const char* name() const override { return "qwen3_next"; }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields f(root, "");
    read_hybrid_fields(f, f, c);
    c.num_experts = f.integer("num_experts");
    if (c.num_experts > 0) {
      c.num_experts_per_tok = f.integer("num_experts_per_tok");
      c.moe_intermediate_size = f.integer("moe_intermediate_size");
      c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size");
    }
    c.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
    c.norm_topk_prob = f.boolean("norm_topk_prob", true);
    c.mlp_only_layers = f.int_list("mlp_only_layers");
    read_layer_types(f, c);
    read_dense_mlp_width(f, c);
    read_token_ids(f, f, c);
  }

  json write_config(const ModelConfig& c) const override {
    json t = hybrid_fields_json(c);
    t["model_type"] = "qwen3_next";
    t["architectures"] = json::array({"Qwen3NextForCausalLM"});
    t["num_experts"] = c.num_experts;
    t["num_experts_per_tok"] = c.num_experts_per_tok;
    t["moe_intermediate_size"] = c.moe_intermediate_size;
    t["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    t["decoder_sparse_step"] = c.decoder_sparse_step;
    t["norm_topk_prob"] = c.norm_topk_prob;
    t["mlp_only_layers"] = c.mlp_only_layers;
    t["dtype"] = "float32";
    return t;
  }

  // MoE on every decoder_sparse_step-th layer except those listed in mlp_only_layers.
  bool layer_is_moe(const ModelConfig& c, int layer) const override {
    if (c.num_experts <= 0) return false;
    if (std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), layer) !=
        c.mlp_only_layers.end())
      return false;
    return c.decoder_sparse_step > 0 && (layer + 1) % c.decoder_sparse_step == 0;
  }

  std::vector<std::string> weight_prefixes() const override { return {"model."}; }

  std::vector<InProjPart> linear_in_proj(const ModelConfig& c) const override {
    const std::vector<int64_t> grouped = grouped_in_proj_rows(c);
    // Inverse map: for source row j of [qkvz ; ba], its canonical row.
    std::vector<int64_t> inv(grouped.size());
    for (size_t r = 0; r < grouped.size(); ++r)
      inv[static_cast<size_t>(grouped[r])] = static_cast<int64_t>(r);
    const auto n_qkvz =
        static_cast<std::ptrdiff_t>(2 * c.linear_key_dim() + 2 * c.linear_value_dim());
    return {{"in_proj_qkvz.weight", std::vector<int64_t>(inv.begin(), inv.begin() + n_qkvz)},
            {"in_proj_ba.weight", std::vector<int64_t>(inv.begin() + n_qkvz, inv.end())}};
  }

  // Multi-token prediction heads; model.visual. as before the per-architecture split, so
  // that no checkpoint loads differently.
  std::vector<std::string> ignored_prefixes() const override {
    return {"mtp.", "model.visual.", "model.mtp."};
  }

  std::vector<std::string> preset_names() const override { return {"tiny", "small", "bench"}; }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    struct Moe {
      int experts, top_k, moe_intermediate, shared_intermediate;
    };
    HybridSizes s{};
    Moe m{};
    if (preset == "tiny") {
      s = {512, 64, 4, 128, 4, 2, 16, 2, 4, 16, 16, 10000.0, 4096};
      m = {4, 2, 32, 64};
    } else if (preset == "small") {
      s = {4096, 256, 8, 512, 4, 2, 64, 2, 4, 64, 64, 1e7, 32768};
      m = {4, 2, 128, 256};
    } else {  // bench
      s = {32000, 1024, 12, 2560, 8, 2, 128, 4, 8, 128, 128, 1e7, 32768};
      m = {16, 4, 256, 512};
    }
    fill_hybrid_preset(s, c);
    c.tie_word_embeddings = false;  // Qwen3-Next keeps a separate lm_head
    c.num_experts = m.experts;
    c.num_experts_per_tok = m.top_k;
    c.moe_intermediate_size = m.moe_intermediate;
    c.shared_expert_intermediate_size = m.shared_intermediate;
    c.decoder_sparse_step = 1;
    c.norm_topk_prob = true;
  }
};

}  // namespace

const ArchSpec& qwen3_next() {
  static const Qwen3Next spec;
  return spec;
}

}  // namespace hypic::model::arch
