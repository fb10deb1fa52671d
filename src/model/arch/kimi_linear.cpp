// Kimi-Linear (moonshotai/Kimi-Linear-48B-A3B; KimiLinearForCausalLM, transformers'
// models/kimi_linear): KDA linear layers (model/layers_kda.hpp) and MLA full-attention layers
// without RoPE (model/layers_mla.hpp), listed 1-based in linear_attn_config; plain RMSNorms;
// a dense SwiGLU MLP below first_k_dense_replace (or where mlp_layer_types says "dense"), MoE
// above: sigmoid router with e_score_correction_bias and expert groups, weights renormalised
// and scaled by routed_scaling_factor, plus ungated shared experts. Tensor names are the
// published checkpoint's (transformers saves the same): self_attn.{q,k,v}_proj /
// {q,k,v}_conv1d / f_a_proj / f_b_proj / A_log [1,1,H,1] / dt_bias / b_proj / g_a_proj /
// g_b_proj / o_norm / o_proj for KDA; self_attn.q_proj / kv_a_proj_with_mqa / kv_a_layernorm /
// kv_b_proj / o_proj for MLA; block_sparse_moe.gate (+ .e_score_correction_bias),
// block_sparse_moe.experts.<e>.w1 (gate) / w3 (up) / w2 (down), block_sparse_moe.shared_experts.
#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "hypic/error.hpp"
#include "model/arch/arch.hpp"
#include "model/arch/common.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

// The first of several alias keys that the object holds ("" when none does): transformers'
// attribute_map lets a config name a field either way.
const char* first_key(const Fields& f, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (f.has(k)) return k;
  return *keys.begin();
}

class KimiLinear final : public ArchSpec {
 public:
  const char* name() const override { return "kimi_linear"; }

  void read_config(const json& root, ModelConfig& c) const override {
    const Fields f(root, "");
    c.vocab_size = f.integer("vocab_size");
    c.hidden_size = f.integer("hidden_size");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-5);
    c.zero_centred_norm = false;
    c.max_position_embeddings =
        f.integer(first_key(f, {"model_max_length", "max_position_embeddings"}), 1048576);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    const std::string act = f.string("hidden_act", "silu");
    HYPIC_REQUIRE(act == "silu",
                  "config.json: field 'hidden_act' is '" + act + "'; only 'silu' is supported");
    HYPIC_REQUIRE(!f.boolean("attention_bias", false),
                  "config.json: field 'attention_bias' is true; not supported");

    // MLA. transformers' KimiLinearAttention applies no rotary embedding at all (the published
    // config says mla_use_nope: true); a RoPE variant would need re-rotation of the cached
    // k_rope and is refused.
    HYPIC_REQUIRE(f.boolean("mla_use_nope", true),
                  "config.json: field 'mla_use_nope' is false: MLA with RoPE on the decoupled key "
                  "is not supported (Kimi-Linear uses no RoPE; transformers applies none)");
    c.num_attention_heads = f.integer("num_attention_heads");
    const int kv_heads = f.integer("num_key_value_heads", c.num_attention_heads);
    HYPIC_REQUIRE(kv_heads == c.num_attention_heads,
                  "config.json: field 'num_key_value_heads' (" + std::to_string(kv_heads) +
                      ") must equal num_attention_heads (" + std::to_string(c.num_attention_heads) +
                      "): MLA expands its latent to every head");
    c.kv_lora_rank = f.integer("kv_lora_rank");
    c.q_lora_rank = f.integer("q_lora_rank", 0);
    c.qk_nope_head_dim = f.integer("qk_nope_head_dim");
    c.qk_rope_head_dim = f.integer("qk_rope_head_dim");
    c.v_head_dim = f.integer("v_head_dim");
    c.num_key_value_heads = 1;  // the cached latent row (config.hpp)
    c.head_dim = c.kv_lora_rank + c.qk_rope_head_dim;
    c.rope_theta = f.number("rope_theta", 10000.0);
    c.partial_rotary_factor = 0.0;

    // KDA: linear_attn_config overrides the flat fields (as transformers reads them).
    const json empty = json::object();
    const bool has_la = f.has("linear_attn_config");
    HYPIC_REQUIRE(!has_la || f.at("linear_attn_config").is_object(),
                  "config.json: field 'linear_attn_config' must be an object");
    const Fields la(has_la ? f.at("linear_attn_config") : empty, "linear_attn_config");
    const int heads = la.integer("num_heads", f.integer("linear_num_heads", 32));
    const int dim = la.integer("head_dim", f.integer("linear_head_dim", 128));
    c.linear_num_key_heads = c.linear_num_value_heads = heads;
    c.linear_key_head_dim = c.linear_value_head_dim = dim;
    c.linear_conv_kernel_dim =
        la.integer("short_conv_kernel_size", f.integer("linear_conv_kernel_dim", 4));
    read_kimi_layer_types(f, la, c);

    // MoE.
    c.num_experts = f.integer(first_key(f, {"num_experts", "num_local_experts"}), 0);
    c.moe_scoring = "sigmoid";
    const std::string act_fn = f.string("moe_router_activation_func", "sigmoid");
    HYPIC_REQUIRE(act_fn == "sigmoid", "config.json: field 'moe_router_activation_func' is '" +
                                           act_fn + "'; kimi_linear routes with sigmoid only");
    HYPIC_REQUIRE(f.integer("moe_layer_freq", 1) == 1,
                  "config.json: field 'moe_layer_freq' must be 1 (every layer above "
                  "first_k_dense_replace is MoE, as transformers builds it)");
    HYPIC_REQUIRE(f.integer("num_nextn_predict_layers", 0) == 0,
                  "config.json: field 'num_nextn_predict_layers' must be 0 (no MTP heads)");
    c.mlp_only_layers.clear();
    if (f.has("mlp_layer_types")) {
      const json& m = f.at("mlp_layer_types");
      HYPIC_REQUIRE(m.is_array() && static_cast<int>(m.size()) == c.num_hidden_layers,
                    "config.json: field 'mlp_layer_types' must list one entry per layer");
      for (size_t i = 0; i < m.size(); ++i) {
        HYPIC_REQUIRE(m[i] == "dense" || m[i] == "sparse",
                      "config.json: field 'mlp_layer_types' holds an entry other than 'dense' / "
                      "'sparse'");
        if (m[i] == "dense") c.mlp_only_layers.push_back(static_cast<int>(i));
      }
    } else {
      const int dense = f.integer("first_k_dense_replace", 1);
      for (int i = 0; i < std::min(dense, c.num_hidden_layers); ++i) c.mlp_only_layers.push_back(i);
    }
    if (c.num_experts > 0) {
      c.num_experts_per_tok =
          f.integer(first_key(f, {"num_experts_per_token", "num_experts_per_tok"}));
      c.moe_intermediate_size = f.integer("moe_intermediate_size");
      const int shared = f.integer(first_key(f, {"num_shared_experts", "n_shared_experts"}), 1);
      HYPIC_REQUIRE(shared >= 0, "config.json: field 'num_shared_experts' must be >= 0");
      const int64_t shared_width = static_cast<int64_t>(shared) * c.moe_intermediate_size;
      check_product(shared_width, kMaxWidth, "num_shared_experts x moe_intermediate_size");
      c.shared_expert_intermediate_size = static_cast<int>(shared_width);
      c.moe_n_group = f.integer(first_key(f, {"num_expert_group", "n_group"}), 1);
      c.moe_topk_group = f.integer("topk_group", 1);
      c.moe_routed_scaling_factor = f.number("routed_scaling_factor", 2.446);
      c.norm_topk_prob = f.boolean(first_key(f, {"moe_renormalize", "norm_topk_prob"}), true);
    }
    read_dense_mlp_width(f, c);
    read_token_ids(f, f, c);
  }

  json write_config(const ModelConfig& c) const override {
    json t;
    t["model_type"] = "kimi_linear";
    t["architectures"] = json::array({"KimiLinearForCausalLM"});
    t["vocab_size"] = c.vocab_size;
    t["hidden_size"] = c.hidden_size;
    t["intermediate_size"] = c.intermediate_size;
    t["num_hidden_layers"] = c.num_hidden_layers;
    t["hidden_act"] = "silu";
    t["attention_bias"] = false;
    t["rms_norm_eps"] = c.rms_norm_eps;
    t["model_max_length"] = c.max_position_embeddings;
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    t["initializer_range"] = 0.02;
    t["use_cache"] = true;
    t["num_attention_heads"] = c.num_attention_heads;
    t["num_key_value_heads"] = c.num_attention_heads;
    t["kv_lora_rank"] = c.kv_lora_rank;
    t["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
    t["qk_nope_head_dim"] = c.qk_nope_head_dim;
    t["qk_rope_head_dim"] = c.qk_rope_head_dim;
    t["v_head_dim"] = c.v_head_dim;
    t["mla_use_nope"] = true;
    t["rope_theta"] = c.rope_theta;
    json full = json::array(), kda = json::array();
    for (int i = 0; i < c.num_hidden_layers; ++i)
      (c.layer_types[static_cast<size_t>(i)] == LayerKind::Mla ? full : kda).push_back(i + 1);
    t["linear_attn_config"] = {{"num_heads", c.linear_num_value_heads},
                               {"head_dim", c.linear_key_head_dim},
                               {"short_conv_kernel_size", c.linear_conv_kernel_dim},
                               {"full_attn_layers", full},
                               {"kda_layers", kda}};
    json mlp = json::array();
    for (int i = 0; i < c.num_hidden_layers; ++i)
      mlp.push_back(layer_is_moe(c, i) ? "sparse" : "dense");
    t["mlp_layer_types"] = mlp;
    t["num_experts"] = c.num_experts;
    if (c.num_experts > 0) {
      t["num_experts_per_token"] = c.num_experts_per_tok;
      t["moe_intermediate_size"] = c.moe_intermediate_size;
      t["num_shared_experts"] = c.shared_expert_intermediate_size / c.moe_intermediate_size;
      t["num_expert_group"] = c.moe_n_group;
      t["topk_group"] = c.moe_topk_group;
      t["routed_scaling_factor"] = c.moe_routed_scaling_factor;
      t["moe_renormalize"] = c.norm_topk_prob;
      t["moe_router_activation_func"] = "sigmoid";
      t["moe_layer_freq"] = 1;
    }
    t["pad_token_id"] = nullptr;  // transformers' default (163839) lies outside small vocabularies
    if (c.bos_token_id >= 0) t["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) t["eos_token_id"] = c.eos_token_ids;
    t["dtype"] = "float32";
    return t;
  }

  void validate(const ModelConfig& c) const override {
    HYPIC_REQUIRE(!c.zero_centred_norm, "config: kimi_linear uses plain RMSNorm weights");
    HYPIC_REQUIRE(c.moe_scoring == "sigmoid", "config: kimi_linear routes with sigmoid scores");
    for (LayerKind k : c.layer_types)
      HYPIC_REQUIRE(k == LayerKind::Kda || k == LayerKind::Mla,
                    "config: kimi_linear layers are KDA or MLA");
    HYPIC_REQUIRE(c.linear_num_key_heads == c.linear_num_value_heads &&
                      c.linear_key_head_dim == c.linear_value_head_dim,
                  "config: KDA has as many key as value heads, of one head_dim");
    auto positive = [](int v, const char* name) {
      HYPIC_REQUIRE(v > 0, std::string("config: ") + name + " must be positive (got " +
                               std::to_string(v) + ")");
    };
    positive(c.kv_lora_rank, "kv_lora_rank");
    positive(c.qk_nope_head_dim, "qk_nope_head_dim");
    positive(c.v_head_dim, "v_head_dim");
    HYPIC_REQUIRE(c.qk_rope_head_dim >= 0, "config: qk_rope_head_dim must be >= 0");
    HYPIC_REQUIRE(c.q_lora_rank >= 0, "config: q_lora_rank must be >= 0 (0: none)");
    HYPIC_REQUIRE(c.num_key_value_heads == 1 && c.head_dim == c.kv_lora_rank + c.qk_rope_head_dim,
                  "config: kimi_linear caches one latent row of kv_lora_rank + qk_rope_head_dim");
    if (c.num_experts > 0)
      HYPIC_REQUIRE(c.num_experts / c.moe_n_group >= 2,
                    "config: each expert group needs at least 2 experts (its score sums its two "
                    "best)");
  }

  bool layer_is_moe(const ModelConfig& c, int layer) const override {
    return c.num_experts > 0 && std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(),
                                          layer) == c.mlp_only_layers.end();
  }

  std::vector<std::string> weight_prefixes() const override { return {"model."}; }
  // KDA layers are read by their own tensor names (model/checkpoint.cpp), not an in_proj.
  std::vector<InProjPart> linear_in_proj(const ModelConfig&) const override { return {}; }
  std::vector<std::string> ignored_prefixes() const override { return {}; }

  MoeNames moe_names() const override {
    MoeNames n;
    n.block = "block_sparse_moe.";
    n.router_bias = "gate.e_score_correction_bias";
    n.shared = "shared_experts.";
    n.shared_gate = "";
    return n;
  }
  // Experts: w1 = gate_proj, w3 = up_proj, w2 = down_proj.
  std::string tensor_name(const std::string& name) const override {
    static const std::regex expert(R"(\.experts\.(\d+)\.(gate|up|down)_proj\.weight$)");
    std::smatch m;
    if (!std::regex_search(name, m, expert)) return name;
    const char* w = m[2] == "gate" ? "w1" : m[2] == "up" ? "w3" : "w2";
    return m.prefix().str() + ".experts." + m[1].str() + "." + w + ".weight";
  }

  // A dense layer's MLP: the published checkpoint names it mlp.; transformers' save_pretrained
  // writes block_sparse_moe. (its rename of the MoE block applies to every layer).
  std::vector<std::string> tensor_aliases(const std::string& name) const override {
    static const std::regex dense(R"(^(.*layers\.\d+\.)mlp\.((gate|up|down)_proj\.weight)$)");
    std::smatch m;
    if (!std::regex_match(name, m, dense)) return {};
    return {m[1].str() + "block_sparse_moe." + m[2].str()};
  }

  std::vector<std::string> preset_names() const override { return {"tiny", "small", "bench"}; }

  void fill_preset(const std::string& preset, ModelConfig& c) const override {
    struct Sizes {
      int vocab, hidden, layers, intermediate;
      int kda_heads, kda_dim;
      int heads, r, rope, nope, v;
      int experts, top_k, moe_i, groups;
    };
    Sizes s{};
    if (preset == "tiny")
      s = {512, 64, 4, 128, 2, 16, 4, 32, 8, 16, 16, 8, 2, 32, 2};
    else if (preset == "small")
      s = {4096, 256, 8, 512, 4, 64, 4, 64, 16, 32, 32, 16, 4, 64, 4};
    else  // bench
      s = {32000, 1024, 12, 2048, 8, 128, 8, 256, 32, 64, 64, 32, 4, 256, 4};
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.num_hidden_layers = s.layers;
    c.intermediate_size = s.intermediate;
    c.rms_norm_eps = 1e-5;
    c.zero_centred_norm = false;
    c.max_position_embeddings = 32768;
    c.full_attention_interval = 4;
    c.layer_types.clear();
    for (int i = 0; i < s.layers; ++i)
      c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::Mla : LayerKind::Kda);
    c.linear_num_key_heads = c.linear_num_value_heads = s.kda_heads;
    c.linear_key_head_dim = c.linear_value_head_dim = s.kda_dim;
    c.linear_conv_kernel_dim = 4;
    c.num_attention_heads = s.heads;
    c.kv_lora_rank = s.r;
    c.q_lora_rank = 0;
    c.qk_rope_head_dim = s.rope;
    c.qk_nope_head_dim = s.nope;
    c.v_head_dim = s.v;
    c.num_key_value_heads = 1;
    c.head_dim = s.r + s.rope;
    c.rope_theta = 10000.0;
    c.partial_rotary_factor = 0.0;
    c.num_experts = s.experts;
    c.num_experts_per_tok = s.top_k;
    c.moe_intermediate_size = s.moe_i;
    c.shared_expert_intermediate_size = s.moe_i;  // one shared expert
    c.moe_scoring = "sigmoid";
    c.moe_n_group = s.groups;
    c.moe_topk_group = s.groups / 2;
    c.moe_routed_scaling_factor = 2.446;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {0};  // first_k_dense_replace = 1, as the published model
  }

 private:
  // layer_types (transformers' saved form) wins, then linear_attn_config's 1-based lists,
  // then transformers' default (every 4th layer from layer 4 on, 0-based, is MLA).
  static void read_kimi_layer_types(const Fields& f, const Fields& la, ModelConfig& c) {
    const int n = c.num_hidden_layers;
    c.layer_types.assign(static_cast<size_t>(n), LayerKind::Kda);
    if (f.has("layer_types")) {
      const json& lt = f.at("layer_types");
      HYPIC_REQUIRE(lt.is_array() && static_cast<int>(lt.size()) == n,
                    "config.json: field 'layer_types' must list one entry per layer");
      for (int i = 0; i < n; ++i) {
        const json& e = lt[static_cast<size_t>(i)];
        HYPIC_REQUIRE(e == "linear_attention" || e == "full_attention",
                      "config.json: field 'layer_types' has an unknown layer type (supported: "
                      "linear_attention, full_attention)");
        if (e == "full_attention") c.layer_types[static_cast<size_t>(i)] = LayerKind::Mla;
      }
    } else if (la.has("full_attn_layers") || la.has("kda_layers")) {
      const std::vector<int> full = la.int_list("full_attn_layers");
      const std::vector<int> kda = la.int_list("kda_layers");
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int l : full) {
        HYPIC_REQUIRE(l >= 1 && l <= n, "config.json: field '" + la.path("full_attn_layers") +
                                            "' holds layer " + std::to_string(l) + ", outside 1.." +
                                            std::to_string(n));
        c.layer_types[static_cast<size_t>(l - 1)] = LayerKind::Mla;
        ++seen[static_cast<size_t>(l - 1)];
      }
      for (int l : kda) {
        HYPIC_REQUIRE(l >= 1 && l <= n, "config.json: field '" + la.path("kda_layers") +
                                            "' holds layer " + std::to_string(l) + ", outside 1.." +
                                            std::to_string(n));
        ++seen[static_cast<size_t>(l - 1)];
      }
      for (int i = 0; i < n; ++i)
        HYPIC_REQUIRE(seen[static_cast<size_t>(i)] == 1,
                      "config.json: linear_attn_config must list layer " + std::to_string(i + 1) +
                          " exactly once (in full_attn_layers or kda_layers)");
    } else {
      for (int i = 0; i < n; ++i)
        if (i > 0 && i % 4 == 0) c.layer_types[static_cast<size_t>(i)] = LayerKind::Mla;
    }
    c.full_attention_interval = 4;
    for (int i = 0; i < n; ++i)
      if (c.layer_types[static_cast<size_t>(i)] == LayerKind::Mla) {
        c.full_attention_interval = i + 1;
        break;
      }
  }
};

}  // namespace

const ArchSpec& kimi_linear() {
  static const KimiLinear spec;
  return spec;
}

}  // namespace hypic::model::arch
