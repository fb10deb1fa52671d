// ModelConfig: reading and writing Hugging Face config.json for qwen3_next and qwen3_5.
#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"

namespace hypic::model {
namespace {

using nlohmann::json;

constexpr const char* kSupported = "qwen3_next, qwen3_5";

// Reads fields of one JSON object and names them as `<where>.<field>` in errors.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  std::string path(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

  int integer(const char* key) const {
    require(has(key), "config.json: missing required field '" + path(key) + "'");
    return as_int(obj_.at(key), path(key));
  }
  int integer(const char* key, int fallback) const { return has(key) ? integer(key) : fallback; }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    require(v.is_number(), "config.json: field '" + path(key) + "' must be a number");
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    require(v.is_boolean(), "config.json: field '" + path(key) + "' must be true or false");
    return v.get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    require(v.is_string(), "config.json: field '" + path(key) + "' must be a string");
    return v.get<std::string>();
  }
  std::vector<int> int_list(const char* key) const {
    std::vector<int> out;
    if (!has(key)) return out;
    const json& v = obj_.at(key);
    if (v.is_number()) return {as_int(v, path(key))};  // eos_token_id may be one number
    require(v.is_array(), "config.json: field '" + path(key) + "' must be a list of integers");
    for (const json& e : v) out.push_back(as_int(e, path(key)));
    return out;
  }
  const json& at(const char* key) const { return obj_.at(key); }

 private:
  static int as_int(const json& v, const std::string& name) {
    require(v.is_number_integer() ||
                (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
            "config.json: field '" + name + "' must be an integer");
    const double d = v.get<double>();
    require(std::fabs(d) < 2147483647.0, "config.json: field '" + name + "' is out of range");
    return static_cast<int>(d);
  }

  const json& obj_;
  std::string where_;
};

const char* layer_type_name(LayerKind k) {
  return k == LayerKind::Linear ? "linear_attention" : "full_attention";
}

}  // namespace

const char* arch_name(Arch a) {
  return a == Arch::Qwen3Next ? "qwen3_next" : "qwen3_5";
}

int ModelConfig::rotary_dim() const {
  return static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
}

bool ModelConfig::layer_is_moe(int layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int ModelConfig::num_linear_layers() const {
  return static_cast<int>(std::count(layer_types.begin(), layer_types.end(), LayerKind::Linear));
}

int ModelConfig::num_full_layers() const {
  return static_cast<int>(
      std::count(layer_types.begin(), layer_types.end(), LayerKind::FullAttention));
}

std::string ModelConfig::layout_string() const {
  std::string s;
  const int group = full_attention_interval > 0 ? full_attention_interval : 4;
  for (size_t i = 0; i < layer_types.size(); ++i) {
    if (i > 0) s += (i % static_cast<size_t>(group) == 0) ? " | " : " ";
    s += layer_types[i] == LayerKind::Linear ? "L" : "A";
  }
  return s;
}

ModelConfig ModelConfig::from_json(const json& root) {
  require(root.is_object(), "config.json: expected a JSON object");
  Fields top(root, "");
  require(top.has("model_type"), "config.json: missing required field 'model_type'");
  const std::string model_type = top.string("model_type", "");

  ModelConfig c;
  std::string where;  // where the text-model fields live
  const json* text = &root;
  if (model_type == "qwen3_next") {
    c.arch = Arch::Qwen3Next;
  } else if (model_type == "qwen3_5" || model_type == "qwen3_5_text") {
    c.arch = Arch::Qwen3_5;
    if (root.contains("text_config") && !root.at("text_config").is_null()) {
      require(root.at("text_config").is_object(),
              "config.json: field 'text_config' must be an object");
      text = &root.at("text_config");
      where = "text_config";
      Fields tf(*text, where);
      const std::string inner = tf.string("model_type", "qwen3_5_text");
      require(inner == "qwen3_5_text" || inner == "qwen3_5",
              "config.json: unsupported text_config.model_type '" + inner +
                  "' (supported: qwen3_5_text)");
    }
  } else {
    throw Error("config.json: unsupported model_type '" + model_type +
                "' (supported: " + kSupported + ")");
  }
  Fields f(*text, where);

  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.integer("max_position_embeddings", 32768);
  // For Qwen3.5 the text model's own flag decides; the top level is the fallback.
  c.tie_word_embeddings =
      f.boolean("tie_word_embeddings", top.boolean("tie_word_embeddings", false));

  const std::string act = f.string("hidden_act", "silu");
  require(act == "silu", "config.json: field '" + f.path("hidden_act") + "' is '" + act +
                             "'; only 'silu' is supported");
  require(!f.boolean("attention_bias", false),
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
    require(rp.is_object(), "config.json: field '" + f.path(key) + "' must be an object");
    Fields r(rp, f.path(key));
    theta = r.number("rope_theta", theta);
    factor = r.number("partial_rotary_factor", factor);
    rope_type = r.string("rope_type", r.string("type", rope_type));
  }
  require(rope_type == "default",
          "config.json: rope_type '" + rope_type + "' is not supported (only 'default')");
  c.rope_theta = theta;
  c.partial_rotary_factor = factor;

  c.linear_num_key_heads = f.integer("linear_num_key_heads");
  c.linear_num_value_heads = f.integer("linear_num_value_heads");
  c.linear_key_head_dim = f.integer("linear_key_head_dim");
  c.linear_value_head_dim = f.integer("linear_value_head_dim");
  c.linear_conv_kernel_dim = f.integer("linear_conv_kernel_dim", 4);

  if (c.arch == Arch::Qwen3Next) {
    c.num_experts = f.integer("num_experts");
    if (c.num_experts > 0) {
      c.num_experts_per_tok = f.integer("num_experts_per_tok");
      c.moe_intermediate_size = f.integer("moe_intermediate_size");
      c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size");
    }
    c.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
    c.norm_topk_prob = f.boolean("norm_topk_prob", true);
    c.mlp_only_layers = f.int_list("mlp_only_layers");
  }

  // Layer kinds: an explicit list wins; otherwise every interval-th layer is full attention.
  c.full_attention_interval = f.integer("full_attention_interval", 4);
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    require(lt.is_array(), "config.json: field '" + f.path("layer_types") + "' must be a list");
    for (const json& e : lt) {
      require(e.is_string(),
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
    require(c.full_attention_interval > 0,
            "config.json: field '" + f.path("full_attention_interval") + "' must be positive");
    for (int i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back((i + 1) % c.full_attention_interval == 0 ? LayerKind::FullAttention
                                                                       : LayerKind::Linear);
  }

  // The dense MLP width is needed only when some layer is dense.
  bool any_dense = false;
  for (int i = 0; i < c.num_hidden_layers; ++i) any_dense = any_dense || !c.layer_is_moe(i);
  c.intermediate_size =
      any_dense ? f.integer("intermediate_size") : f.integer("intermediate_size", 0);

  c.bos_token_id = f.has("bos_token_id")
                       ? f.integer("bos_token_id")
                       : (top.has("bos_token_id") ? top.integer("bos_token_id") : -1);
  c.eos_token_ids =
      f.has("eos_token_id") ? f.int_list("eos_token_id") : top.int_list("eos_token_id");

  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto positive = [](int v, const char* name) {
    require(v > 0,
            std::string("config: ") + name + " must be positive (got " + std::to_string(v) + ")");
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
  require(rms_norm_eps > 0, "config: rms_norm_eps must be positive");
  require(rope_theta > 0, "config: rope_theta must be positive");
  require(static_cast<int>(layer_types.size()) == num_hidden_layers,
          "config: layer_types has " + std::to_string(layer_types.size()) +
              " entries but num_hidden_layers is " + std::to_string(num_hidden_layers));
  require(num_attention_heads % num_key_value_heads == 0,
          "config: num_attention_heads (" + std::to_string(num_attention_heads) +
              ") must be a multiple of num_key_value_heads (" +
              std::to_string(num_key_value_heads) + ")");
  require(linear_num_value_heads % linear_num_key_heads == 0,
          "config: linear_num_value_heads (" + std::to_string(linear_num_value_heads) +
              ") must be a multiple of linear_num_key_heads (" +
              std::to_string(linear_num_key_heads) + ")");
  const int rot = rotary_dim();
  require(partial_rotary_factor > 0 && partial_rotary_factor <= 1 && rot >= 2 && rot % 2 == 0,
          "config: head_dim * partial_rotary_factor must be an even number >= 2 (got " +
              std::to_string(head_dim) + " * " + std::to_string(partial_rotary_factor) + ")");
  if (arch == Arch::Qwen3_5) {
    require(num_experts == 0,
            "config: qwen3_5 text models have no experts (num_experts must be 0)");
  }
  if (num_experts > 0) {
    require(num_experts_per_tok > 0 && num_experts_per_tok <= num_experts,
            "config: num_experts_per_tok must be between 1 and num_experts (" +
                std::to_string(num_experts) + "), got " + std::to_string(num_experts_per_tok));
    positive(moe_intermediate_size, "moe_intermediate_size");
    positive(shared_expert_intermediate_size, "shared_expert_intermediate_size");
    positive(decoder_sparse_step, "decoder_sparse_step");
  }
  for (int l : mlp_only_layers)
    require(l >= 0 && l < num_hidden_layers, "config: mlp_only_layers holds layer " +
                                                 std::to_string(l) + ", outside 0.." +
                                                 std::to_string(num_hidden_layers - 1));
  for (int i = 0; i < num_hidden_layers; ++i) {
    if (!layer_is_moe(i)) {
      positive(intermediate_size, "intermediate_size");
      break;
    }
  }
}

json ModelConfig::to_json() const {
  json t;
  t["vocab_size"] = vocab_size;
  t["hidden_size"] = hidden_size;
  t["intermediate_size"] = intermediate_size;
  t["num_hidden_layers"] = num_hidden_layers;
  t["num_attention_heads"] = num_attention_heads;
  t["num_key_value_heads"] = num_key_value_heads;
  t["head_dim"] = head_dim;
  t["hidden_act"] = "silu";
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["max_position_embeddings"] = max_position_embeddings;
  t["rms_norm_eps"] = rms_norm_eps;
  t["tie_word_embeddings"] = tie_word_embeddings;
  t["initializer_range"] = 0.02;
  t["use_cache"] = true;
  t["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", rope_theta},
                          {"partial_rotary_factor", partial_rotary_factor}};
  t["full_attention_interval"] = full_attention_interval;
  json lt = json::array();
  for (LayerKind k : layer_types) lt.push_back(layer_type_name(k));
  t["layer_types"] = lt;
  t["linear_num_key_heads"] = linear_num_key_heads;
  t["linear_num_value_heads"] = linear_num_value_heads;
  t["linear_key_head_dim"] = linear_key_head_dim;
  t["linear_value_head_dim"] = linear_value_head_dim;
  t["linear_conv_kernel_dim"] = linear_conv_kernel_dim;
  if (bos_token_id >= 0) t["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) t["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) t["eos_token_id"] = eos_token_ids;

  if (arch == Arch::Qwen3Next) {
    t["model_type"] = "qwen3_next";
    t["architectures"] = json::array({"Qwen3NextForCausalLM"});
    t["num_experts"] = num_experts;
    t["num_experts_per_tok"] = num_experts_per_tok;
    t["moe_intermediate_size"] = moe_intermediate_size;
    t["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
    t["decoder_sparse_step"] = decoder_sparse_step;
    t["norm_topk_prob"] = norm_topk_prob;
    t["mlp_only_layers"] = mlp_only_layers;
    t["dtype"] = "float32";
    return t;
  }
  // Qwen3.5: the composite layout of the published checkpoints (text part under
  // text_config, weights under model.language_model.), without a vision tower.
  t["model_type"] = "qwen3_5_text";
  json root;
  root["model_type"] = "qwen3_5";
  root["architectures"] = json::array({"Qwen3_5ForCausalLM"});
  root["tie_word_embeddings"] = tie_word_embeddings;
  root["text_config"] = t;
  root["dtype"] = "float32";
  return root;
}

}  // namespace hypic::model
