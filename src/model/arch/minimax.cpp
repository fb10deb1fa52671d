// MiniMax (MiniMax-Text-01, MiniMax-M1; transformers' MiniMaxForCausalLM, model_type minimax):
// lightning attention layers (LayerKind::Lightning, model/layers_lightning.hpp) alternating
// with Mixtral-style softmax GQA attention (no output gate, no q/k norms) per layer_types, a
// Mixtral MoE in every layer (softmax router, top-k renormalised, no shared expert), plain
// RMSNorm weights, and residuals taken from the normed stream with per-kind scales:
//   h ← alpha · norm(h) + beta · layer(norm(h))   (attention kinds, then the MoE)
// config.json: transformers' names (layer_types, *_alpha_factor / *_beta_factor,
// num_local_experts, intermediate_size = the expert width) or the original remote-code names
// (attn_type_list 0 = lightning / 1 = softmax, layernorm_*_alpha / _beta, postnorm,
// rotary_dim). Checkpoints: model.layers.<l>.self_attn.{qkv_proj,output_gate,norm,out_proj}
// (lightning) or self_attn.{q,k,v,o}_proj, block_sparse_moe.gate and
// block_sparse_moe.experts.<e>.{w1,w3,w2} (gate, up, down); the lightning decay tables that
// transformers saves as buffers are derived from the config and skipped.
#include <cmath>

#include <nlohmann/json.hpp>

#include "hypic/error.hpp"
#include "model/arch/arch.hpp"
#include "model/arch/common.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

class MiniMax final : public ArchSpec {
 public:
  const char* name() const override { return "minimax"; }
  // The published checkpoints' remote-code configs name these; transformers converts both.
  std::vector<std::string> model_types() const override {
    return {"minimax", "minimax_text_01", "minimax_m1"};
  }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields f(root, "");
    c.vocab_size = f.integer("vocab_size");
    c.hidden_size = f.integer("hidden_size");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-5);
    c.max_position_embeddings = f.integer("max_position_embeddings", 4096 * 32);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    const std::string act = f.string("hidden_act", "silu");
    HYPIC_REQUIRE(act == "silu",
                  "config.json: field 'hidden_act' is '" + act + "'; only 'silu' is supported");
    HYPIC_REQUIRE(!f.has("sliding_window"),
                  "config.json: field 'sliding_window' is set; minimax with a sliding window is "
                  "not supported");
    HYPIC_REQUIRE(f.boolean("postnorm", true),
                  "config.json: field 'postnorm' is false; only MiniMax's post-norm residual (as "
                  "transformers runs it) is supported");

    c.num_attention_heads = f.integer("num_attention_heads");
    c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
    HYPIC_REQUIRE(c.num_attention_heads > 0,
                  "config.json: field 'num_attention_heads' must be "
                  "positive");
    c.head_dim = f.integer("head_dim", c.hidden_size / c.num_attention_heads);

    double theta = f.number("rope_theta", 1e6);
    double factor = 1.0;
    if (f.has("rotary_dim")) factor = static_cast<double>(f.integer("rotary_dim")) / c.head_dim;
    std::string rope_type = "default";
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
      if (!f.has(key)) continue;
      HYPIC_REQUIRE(f.at(key).is_object(),
                    "config.json: field '" + std::string(key) + "' must be an object");
      const Fields r(f.at(key), key);
      theta = r.number("rope_theta", theta);
      factor = r.number("partial_rotary_factor", factor);
      rope_type = r.string("rope_type", r.string("type", rope_type));
    }
    HYPIC_REQUIRE(rope_type == "default",
                  "config.json: rope_type '" + rope_type + "' is not supported (only 'default')");
    c.rope_theta = theta;
    c.partial_rotary_factor = factor;

    read_minimax_layer_types(f, c);
    c.lightning_block_size = f.integer("block_size", 256);
    // The lightning layers are the model's linear-attention layers: H heads of hd × hd state,
    // no conv (entries then hold T and S only).
    c.linear_num_key_heads = c.linear_num_value_heads = c.num_attention_heads;
    c.linear_key_head_dim = c.linear_value_head_dim = c.head_dim;
    c.linear_conv_kernel_dim = 1;

    c.num_experts = f.integer(f.has("num_local_experts") ? "num_local_experts" : "num_experts");
    c.num_experts_per_tok = f.integer("num_experts_per_tok");
    c.moe_intermediate_size = f.integer("intermediate_size");
    HYPIC_REQUIRE(f.integer("shared_intermediate_size", 0) == 0,
                  "config.json: field 'shared_intermediate_size' is not 0; minimax with a "
                  "shared expert is not supported");
    c.shared_expert_intermediate_size = 0;
    c.intermediate_size = 0;
    c.norm_topk_prob = true;  // Mixtral's router renormalises the top-k probabilities
    c.decoder_sparse_step = 1;

    c.zero_centred_norm = false;
    c.attention_output_gate = false;
    c.attention_qk_norm = false;
    c.residual_from_norm = true;
    auto scale = [&](const char* hf, const char* original) {
      return f.number(hf, f.number(original, 1.0));
    };
    c.linear_attn_alpha = scale("linear_attn_alpha_factor", "layernorm_linear_attention_alpha");
    c.linear_attn_beta = scale("linear_attn_beta_factor", "layernorm_linear_attention_beta");
    c.full_attn_alpha = scale("full_attn_alpha_factor", "layernorm_full_attention_alpha");
    c.full_attn_beta = scale("full_attn_beta_factor", "layernorm_full_attention_beta");
    c.mlp_alpha = scale("mlp_alpha_factor", "layernorm_mlp_alpha");
    c.mlp_beta = scale("mlp_beta_factor", "layernorm_mlp_beta");
    read_token_ids(f, f, c);
  }

  json write_config(const ModelConfig& c) const override {
    json t;
    t["model_type"] = "minimax";
    t["architectures"] = json::array({"MiniMaxForCausalLM"});
    t["vocab_size"] = c.vocab_size;
    t["hidden_size"] = c.hidden_size;
    t["intermediate_size"] = c.moe_intermediate_size;
    t["num_hidden_layers"] = c.num_hidden_layers;
    t["num_attention_heads"] = c.num_attention_heads;
    t["num_key_value_heads"] = c.num_key_value_heads;
    t["head_dim"] = c.head_dim;
    t["hidden_act"] = "silu";
    t["max_position_embeddings"] = c.max_position_embeddings;
    t["rms_norm_eps"] = c.rms_norm_eps;
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    t["attention_dropout"] = 0.0;
    t["initializer_range"] = 0.02;
    t["use_cache"] = true;
    t["num_local_experts"] = c.num_experts;
    t["num_experts_per_tok"] = c.num_experts_per_tok;
    t["router_jitter_noise"] = 0.0;
    json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    if (c.partial_rotary_factor != 1.0) rope["partial_rotary_factor"] = c.partial_rotary_factor;
    t["rope_parameters"] = rope;
    json lt = json::array();
    for (LayerKind k : c.layer_types)
      lt.push_back(k == LayerKind::FullAttention ? "full_attention" : "linear_attention");
    t["layer_types"] = lt;
    t["block_size"] = c.lightning_block_size;
    t["full_attn_alpha_factor"] = c.full_attn_alpha;
    t["full_attn_beta_factor"] = c.full_attn_beta;
    t["linear_attn_alpha_factor"] = c.linear_attn_alpha;
    t["linear_attn_beta_factor"] = c.linear_attn_beta;
    t["mlp_alpha_factor"] = c.mlp_alpha;
    t["mlp_beta_factor"] = c.mlp_beta;
    if (c.bos_token_id >= 0) t["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) t["eos_token_id"] = c.eos_token_ids;
    t["dtype"] = "float32";
    return t;
  }

  void validate(const ModelConfig& c) const override {
    HYPIC_REQUIRE(
        c.num_experts > 0,
        "config: minimax has experts in every layer (num_local_experts must be positive)");
    HYPIC_REQUIRE(
        c.shared_expert_intermediate_size == 0,
        "config: minimax has no shared expert (shared_expert_intermediate_size must be 0)");
    for (LayerKind k : c.layer_types)
      HYPIC_REQUIRE(k != LayerKind::Linear,
                    "config: minimax layers are lightning or full attention, not Gated DeltaNet");
    HYPIC_REQUIRE(c.linear_num_value_heads == c.num_attention_heads &&
                      c.linear_key_head_dim == c.head_dim && c.linear_value_head_dim == c.head_dim,
                  "config: minimax's linear-attention sizes are its attention heads and head_dim");
    HYPIC_REQUIRE(c.mlp_beta != 0 && c.linear_attn_beta != 0 && c.full_attn_beta != 0,
                  "config: minimax's residual beta factors must not be 0");
  }

  bool layer_is_moe(const ModelConfig& c, int) const override { return c.num_experts > 0; }

  std::vector<std::string> weight_prefixes() const override { return {"model."}; }

  std::vector<InProjPart> linear_in_proj(const ModelConfig&) const override {
    return {};  // no Gated DeltaNet layers
  }

  std::vector<std::string> ignored_prefixes() const override { return {}; }

  std::vector<std::string> ignored_suffixes() const override {
    return {".self_attn.slope_rate", ".self_attn.query_decay", ".self_attn.key_decay",
            ".self_attn.diagonal_decay"};
  }

  MoeNames moe_names() const override {
    MoeNames n;
    n.block = "block_sparse_moe.";
    n.shared.clear();  // no shared expert
    n.shared_gate.clear();
    return n;
  }
  std::vector<std::string> expert_projections() const override {
    return {"w1.weight", "w3.weight", "w2.weight"};
  }

  std::vector<std::string> preset_names() const override { return {"tiny", "small", "bench"}; }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    struct Sizes {
      int vocab, hidden, layers, heads, kv_heads, head_dim, interval;
      int experts, top_k, width;
      double theta;
      int max_positions;
    };
    Sizes s{};
    if (preset == "tiny")
      s = {512, 64, 4, 4, 2, 16, 4, 8, 2, 32, 10000.0, 4096};
    else if (preset == "small")
      s = {4096, 256, 8, 4, 2, 64, 4, 16, 4, 64, 1e7, 32768};
    else  // bench: MiniMax-Text-01's 7 lightning layers to 1 softmax layer
      s = {32000, 1024, 16, 8, 2, 128, 8, 32, 2, 256, 1e7, 32768};
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.num_hidden_layers = s.layers;
    c.rms_norm_eps = 1e-5;
    c.max_position_embeddings = s.max_positions;
    c.tie_word_embeddings = false;
    c.full_attention_interval = s.interval;
    c.layer_types.clear();
    for (int i = 0; i < s.layers; ++i)
      c.layer_types.push_back((i + 1) % s.interval == 0 ? LayerKind::FullAttention
                                                        : LayerKind::Lightning);
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.rope_theta = s.theta;
    c.partial_rotary_factor = 1.0;
    c.linear_num_key_heads = c.linear_num_value_heads = s.heads;
    c.linear_key_head_dim = c.linear_value_head_dim = s.head_dim;
    c.linear_conv_kernel_dim = 1;
    c.num_experts = s.experts;
    c.num_experts_per_tok = s.top_k;
    c.moe_intermediate_size = s.width;
    c.shared_expert_intermediate_size = 0;
    c.intermediate_size = 0;
    c.norm_topk_prob = true;
    c.zero_centred_norm = false;
    c.attention_output_gate = false;
    c.attention_qk_norm = false;
    c.residual_from_norm = true;
    // MiniMax-Text-01 sets alpha = (2 · layers)^¼ (3.5566 for 80 layers) and beta = 1.
    const double alpha = std::pow(2.0 * s.layers, 0.25);
    c.linear_attn_alpha = c.full_attn_alpha = c.mlp_alpha = alpha;
    c.linear_attn_beta = c.full_attn_beta = c.mlp_beta = 1.0;
    c.lightning_block_size = 256;
  }

 private:
  // layer_types ("linear_attention" = lightning) or the original attn_type_list (0 =
  // lightning, 1 = softmax); transformers' default alternates, starting with softmax.
  static void read_minimax_layer_types(const Fields& f, ModelConfig& c) {
    c.layer_types.clear();
    if (f.has("layer_types")) {
      const json& lt = f.at("layer_types");
      HYPIC_REQUIRE(lt.is_array(), "config.json: field 'layer_types' must be a list");
      for (const json& e : lt) {
        const std::string s = e.is_string() ? e.get<std::string>() : "";
        if (s == "linear_attention")
          c.layer_types.push_back(LayerKind::Lightning);
        else if (s == "full_attention")
          c.layer_types.push_back(LayerKind::FullAttention);
        else
          throw Error("config.json: field 'layer_types' has unknown layer type " + e.dump() +
                      " (supported: linear_attention, full_attention)");
      }
    } else if (f.has("attn_type_list")) {
      for (int v : f.int_list("attn_type_list")) {
        HYPIC_REQUIRE(v == 0 || v == 1, "config.json: field 'attn_type_list' holds " +
                                            std::to_string(v) + " (0 = lightning, 1 = softmax)");
        c.layer_types.push_back(v == 1 ? LayerKind::FullAttention : LayerKind::Lightning);
      }
    } else {
      for (int i = 0; i < c.num_hidden_layers; ++i)
        c.layer_types.push_back(i % 2 == 0 ? LayerKind::FullAttention : LayerKind::Lightning);
    }
    c.full_attention_interval = 0;
    for (size_t i = 0; i < c.layer_types.size(); ++i)
      if (c.layer_types[i] == LayerKind::FullAttention) {
        c.full_attention_interval = static_cast<int>(i) + 1;
        break;
      }
    if (c.full_attention_interval == 0) c.full_attention_interval = c.num_hidden_layers;
  }
};

}  // namespace

const ArchSpec& minimax() {
  static const MiniMax spec;
  return spec;
}

}  // namespace hypic::model::arch
