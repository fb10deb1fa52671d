// Building blocks shared by the architecture files (see common.hpp).
#include "model/arch/common.hpp"

#include <algorithm>
#include <cmath>

#include "hypic/error.hpp"

namespace hypic::model::arch {
namespace {

using nlohmann::json;

int as_int(const json& v, const std::string& name) {
  HYPIC_REQUIRE(v.is_number_integer() ||
                    (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
                "config.json: field '" + name + "' must be an integer");
  const double d = v.get<double>();
  HYPIC_REQUIRE(std::fabs(d) < 2147483647.0, "config.json: field '" + name + "' is out of range");
  return static_cast<int>(d);
}

const char* layer_type_name(LayerKind k) {
  return is_linear_kind(k) ? "linear_attention" : "full_attention";
}

}  // namespace

namespace {
struct SizeBound {
  const char* key;
  int64_t min, max;
};
// Every size field that sizes an allocation, with its bounds. Zero passes here: whether a
// field may be 0 is the architecture's check ("must be positive"), run after reading.
constexpr SizeBound kSizeBounds[] = {
    {"num_hidden_layers", 0, kMaxLayers},
    {"num_experts", 0, kMaxExperts},
    {"num_local_experts", 0, kMaxExperts},
    {"num_experts_per_tok", 0, kMaxExperts},
    {"num_experts_per_token", 0, kMaxExperts},
    {"vocab_size", 0, kMaxVocab},
    {"hidden_size", 0, kMaxWidth},
    {"intermediate_size", 0, kMaxWidth},
    {"moe_intermediate_size", 0, kMaxWidth},
    {"shared_expert_intermediate_size", 0, kMaxWidth},
    {"shared_intermediate_size", 0, kMaxWidth},
    {"moe_shared_expert_intermediate_size", 0, kMaxWidth},
    {"num_attention_heads", 0, kMaxHeads},
    {"num_key_value_heads", 0, kMaxHeads},
    {"linear_num_key_heads", 0, kMaxHeads},
    {"linear_num_value_heads", 0, kMaxHeads},
    {"linear_num_heads", 0, kMaxHeads},
    {"num_heads", 0, kMaxHeads},
    {"head_dim", 0, kMaxHeadDim},
    {"linear_key_head_dim", 0, kMaxHeadDim},
    {"linear_value_head_dim", 0, kMaxHeadDim},
    {"linear_head_dim", 0, kMaxHeadDim},
    {"kv_lora_rank", 0, kMaxHeadDim},
    {"q_lora_rank", 0, kMaxHeadDim},
    {"qk_nope_head_dim", 0, kMaxHeadDim},
    {"qk_rope_head_dim", 0, kMaxHeadDim},
    {"v_head_dim", 0, kMaxHeadDim},
    {"rotary_dim", 0, kMaxHeadDim},
    {"linear_conv_kernel_dim", 0, kMaxSmallCount},
    {"short_conv_kernel_size", 0, kMaxSmallCount},
    {"num_shared_experts", 0, kMaxSmallCount},
    {"n_shared_experts", 0, kMaxSmallCount},
    {"num_expert_group", 0, kMaxExperts},
    {"n_group", 0, kMaxExperts},
    {"topk_group", 0, kMaxExperts},
};

void check_size_fields_of(const json& obj, const std::string& where) {
  if (!obj.is_object()) return;
  for (const SizeBound& b : kSizeBounds) {
    const auto it = obj.find(b.key);
    if (it == obj.end() || !it->is_number()) continue;  // the reader names other kinds
    const std::string name = where.empty() ? b.key : where + "." + b.key;
    const double v = it->get<double>();
    HYPIC_REQUIRE(v >= static_cast<double>(b.min) && v <= static_cast<double>(b.max),
                  "config.json: field '" + name + "' is " + it->dump() + ", outside " +
                      std::to_string(b.min) + ".." + std::to_string(b.max) +
                      " (hypic's bound for this size; docs/input-checks.md)");
  }
}
}  // namespace

void check_size_fields(const json& root) {
  if (!root.is_object()) return;
  check_size_fields_of(root, "");
  for (const char* nested : {"text_config", "linear_attn_config"})
    if (root.contains(nested)) check_size_fields_of(root.at(nested), nested);
}

void check_product(int64_t value, int64_t limit, const std::string& what) {
  HYPIC_REQUIRE(value <= limit, "config: " + what + " is " + std::to_string(value) +
                                    ", more than hypic's bound of " + std::to_string(limit) +
                                    " (docs/input-checks.md)");
}

bool Fields::has(const char* key) const {
  return obj_.contains(key) && !obj_.at(key).is_null();
}

std::string Fields::path(const char* key) const {
  return where_.empty() ? key : where_ + "." + key;
}

int Fields::integer(const char* key) const {
  HYPIC_REQUIRE(has(key), "config.json: missing required field '" + path(key) + "'");
  return as_int(obj_.at(key), path(key));
}

int Fields::integer(const char* key, int fallback) const {
  return has(key) ? integer(key) : fallback;
}

double Fields::number(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  const json& v = obj_.at(key);
  HYPIC_REQUIRE(v.is_number(), "config.json: field '" + path(key) + "' must be a number");
  return v.get<double>();
}

bool Fields::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const json& v = obj_.at(key);
  HYPIC_REQUIRE(v.is_boolean(), "config.json: field '" + path(key) + "' must be true or false");
  return v.get<bool>();
}

std::string Fields::string(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const json& v = obj_.at(key);
  HYPIC_REQUIRE(v.is_string(), "config.json: field '" + path(key) + "' must be a string");
  return v.get<std::string>();
}

std::vector<int> Fields::int_list(const char* key) const {
  std::vector<int> out;
  if (!has(key)) return out;
  const json& v = obj_.at(key);
  if (v.is_number()) return {as_int(v, path(key))};  // eos_token_id may be one number
  HYPIC_REQUIRE(v.is_array(), "config.json: field '" + path(key) + "' must be a list of integers");
  for (const json& e : v) out.push_back(as_int(e, path(key)));
  return out;
}

void read_hybrid_fields(const Fields& f, const Fields& top, ModelConfig& c) {
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.integer("max_position_embeddings", 32768);
  // For nested configs the text model's own flag decides; the top level is the fallback.
  c.tie_word_embeddings =
      f.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", false));

  const std::string act = f.string("hidden_act", "silu");
  HYPIC_REQUIRE(act == "silu", "config.json: field '" + f.path("hidden_act") + "' is '" + act +
                                   "'; only 'silu' is supported");
  HYPIC_REQUIRE(!f.boolean("attention_bias", false),
                "config.json: field '" + f.path("attention_bias") + "' is true; not supported");

  c.num_attention_heads = f.integer("num_attention_heads");
  c.num_key_value_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim");

  // RoPE: rope_parameters (transformers 5), else top-level keys (older configs).
  double theta = f.number("rope_theta", 10000.0);
  double factor = f.number("partial_rotary_factor", 0.25);
  std::string rope_type = "default";
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!f.has(key)) continue;
    const json& rp = f.at(key);
    HYPIC_REQUIRE(rp.is_object(), "config.json: field '" + f.path(key) + "' must be an object");
    Fields r(rp, f.path(key));
    theta = r.number("rope_theta", theta);
    factor = r.number("partial_rotary_factor", factor);
    rope_type = r.string("rope_type", r.string("type", rope_type));
  }
  HYPIC_REQUIRE(rope_type == "default",
                "config.json: rope_type '" + rope_type + "' is not supported (only 'default')");
  c.rope_theta = theta;
  c.partial_rotary_factor = factor;

  c.linear_num_key_heads = f.integer("linear_num_key_heads");
  c.linear_num_value_heads = f.integer("linear_num_value_heads");
  c.linear_key_head_dim = f.integer("linear_key_head_dim");
  c.linear_value_head_dim = f.integer("linear_value_head_dim");
  c.linear_conv_kernel_dim = f.integer("linear_conv_kernel_dim", 4);
}

void read_layer_types(const Fields& f, ModelConfig& c) {
  c.full_attention_interval = f.integer("full_attention_interval", 4);
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    HYPIC_REQUIRE(lt.is_array(),
                  "config.json: field '" + f.path("layer_types") + "' must be a list");
    for (const json& e : lt) {
      HYPIC_REQUIRE(e.is_string(),
                    "config.json: field '" + f.path("layer_types") + "' must be a list of strings");
      const std::string s = e.get<std::string>();
      if (s == "linear_attention") {
        c.layer_types.push_back(LayerKind::Linear);
      } else if (s == "full_attention") {
        c.layer_types.push_back(LayerKind::FullAttention);
      } else {
        throw Error("config.json: field '" + f.path("layer_types") + "' has unknown layer type '" +
                    s + "' (supported: linear_attention, full_attention)");
      }
    }
    // Recover the interval for display when the list follows the usual pattern.
    if (!f.has("full_attention_interval")) {
      for (size_t i = 0; i < c.layer_types.size(); ++i) {
        if (c.layer_types[i] == LayerKind::FullAttention) {
          c.full_attention_interval = static_cast<int>(i) + 1;
          break;
        }
      }
    }
  } else {
    HYPIC_REQUIRE(
        c.full_attention_interval > 0,
        "config.json: field '" + f.path("full_attention_interval") + "' must be positive");
    for (int i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back((i + 1) % c.full_attention_interval == 0 ? LayerKind::FullAttention
                                                                       : LayerKind::Linear);
  }
}

void read_dense_mlp_width(const Fields& f, ModelConfig& c) {
  bool any_dense = false;
  for (int i = 0; i < c.num_hidden_layers; ++i) any_dense = any_dense || !c.layer_is_moe(i);
  c.intermediate_size =
      any_dense ? f.integer("intermediate_size") : f.integer("intermediate_size", 0);
}

void read_token_ids(const Fields& f, const Fields& top, ModelConfig& c) {
  c.bos_token_id = f.has("bos_token_id")
                       ? f.integer("bos_token_id")
                       : (top.has("bos_token_id") ? top.integer("bos_token_id") : -1);
  c.eos_token_ids =
      f.has("eos_token_id") ? f.int_list("eos_token_id") : top.int_list("eos_token_id");
}

json hybrid_fields_json(const ModelConfig& c) {
  json t;
  t["vocab_size"] = c.vocab_size;
  t["hidden_size"] = c.hidden_size;
  t["intermediate_size"] = c.intermediate_size;
  t["num_hidden_layers"] = c.num_hidden_layers;
  t["num_attention_heads"] = c.num_attention_heads;
  t["num_key_value_heads"] = c.num_key_value_heads;
  t["head_dim"] = c.head_dim;
  t["hidden_act"] = "silu";
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["max_position_embeddings"] = c.max_position_embeddings;
  t["rms_norm_eps"] = c.rms_norm_eps;
  t["tie_word_embeddings"] = c.tie_word_embeddings;
  t["initializer_range"] = 0.02;
  t["use_cache"] = true;
  t["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", c.rope_theta},
                          {"partial_rotary_factor", c.partial_rotary_factor}};
  t["full_attention_interval"] = c.full_attention_interval;
  json lt = json::array();
  for (LayerKind k : c.layer_types) lt.push_back(layer_type_name(k));
  t["layer_types"] = lt;
  t["linear_num_key_heads"] = c.linear_num_key_heads;
  t["linear_num_value_heads"] = c.linear_num_value_heads;
  t["linear_key_head_dim"] = c.linear_key_head_dim;
  t["linear_value_head_dim"] = c.linear_value_head_dim;
  t["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  if (c.bos_token_id >= 0) t["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) t["eos_token_id"] = c.eos_token_ids;
  return t;
}

void fill_hybrid_preset(const HybridSizes& s, ModelConfig& c) {
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.num_hidden_layers = s.layers;
  c.intermediate_size = s.intermediate;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = s.max_positions;
  c.full_attention_interval = 4;
  c.layer_types.clear();
  for (int i = 0; i < s.layers; ++i)
    c.layer_types.push_back((i + 1) % 4 == 0 ? LayerKind::FullAttention : LayerKind::Linear);
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rope_theta = s.rope_theta;
  c.partial_rotary_factor = 0.25;
  c.linear_num_key_heads = s.lin_k_heads;
  c.linear_num_value_heads = s.lin_v_heads;
  c.linear_key_head_dim = s.lin_k_dim;
  c.linear_value_head_dim = s.lin_v_dim;
  c.linear_conv_kernel_dim = 4;
}

const nlohmann::json& text_model_fields(const nlohmann::json& root,
                                        const std::vector<std::string>& accepted,
                                        std::string& where) {
  where.clear();
  if (!root.contains("text_config") || root.at("text_config").is_null()) return root;
  HYPIC_REQUIRE(root.at("text_config").is_object(),
                "config.json: field 'text_config' must be an object");
  where = "text_config";
  const nlohmann::json& text = root.at("text_config");
  const std::string inner = Fields(text, where).string("model_type", accepted.front());
  HYPIC_REQUIRE(std::find(accepted.begin(), accepted.end(), inner) != accepted.end(),
                "config.json: unsupported text_config.model_type '" + inner +
                    "' (supported: " + accepted.front() + ")");
  return text;
}

}  // namespace hypic::model::arch
