#pragma once
// Building blocks the architecture files share: a reader for config.json fields that names
// them in errors, and the readers / writers of the fields every Qwen-family hybrid model
// (Gated DeltaNet + gated attention) holds. An architecture file calls them in the order
// its config.json is checked; what differs between architectures stays in its own file.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"

namespace hypic::model::arch {

// Reads fields of one JSON object and names them as `<where>.<field>` in errors.
class Fields {
 public:
  Fields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const;
  std::string path(const char* key) const;
  int integer(const char* key) const;  // required
  int integer(const char* key, int fallback) const;
  double number(const char* key, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  std::vector<int> int_list(const char* key) const;  // a single number counts as a list
  const nlohmann::json& at(const char* key) const { return obj_.at(key); }

 private:
  const nlohmann::json& obj_;
  std::string where_;
};

// Upper bounds on config.json's sizes (docs/input-checks.md), checked before anything is
// allocated from them: one layer count, expert count or width beyond these is no model a machine
// holds, and every product of two of them then fits 64-bit (and the int fields) arithmetic.
inline constexpr int64_t kMaxLayers = 4096;      // num_hidden_layers
inline constexpr int64_t kMaxExperts = 16384;    // num_experts / num_local_experts
inline constexpr int64_t kMaxVocab = 1 << 24;    // vocab_size
inline constexpr int64_t kMaxWidth = 1 << 20;    // hidden / MLP widths, heads x head_dim
inline constexpr int64_t kMaxHeads = 8192;       // attention / linear-attention heads
inline constexpr int64_t kMaxHeadDim = 1 << 16;  // per-head dimensions, LoRA ranks
inline constexpr int64_t kMaxSmallCount = 1024;  // conv kernel, shared experts, groups
// Refuses, naming the field, every size field of `root` (and of its text_config and
// linear_attn_config) outside its bound above. Runs before an architecture reads `root`.
void check_size_fields(const nlohmann::json& root);
// Refuses a product of sizes (computed in 64 bits by the caller) above `limit`, naming it.
void check_product(int64_t value, int64_t limit, const std::string& what);

// Sizes, norms, activation, attention, RoPE and Gated DeltaNet fields, read from the text
// model's fields `f`; `top` is the top level (fallback for tie_word_embeddings).
void read_hybrid_fields(const Fields& f, const Fields& top, ModelConfig& c);

// Where a Qwen3.5-family config.json keeps its text model's fields: the file itself (a flat
// text config) or its `text_config` (the published multimodal layout), whose model_type must be
// one of `accepted` (the first is the default). `where` receives "text_config" or "".
const nlohmann::json& text_model_fields(const nlohmann::json& root,
                                        const std::vector<std::string>& accepted,
                                        std::string& where);
// The attention kind of each layer: an explicit layer_types list wins; otherwise every
// full_attention_interval-th layer is full attention.
void read_layer_types(const Fields& f, ModelConfig& c);
// intermediate_size, required when some layer is dense (c.arch decides which are MoE).
void read_dense_mlp_width(const Fields& f, ModelConfig& c);
// bos_token_id / eos_token_id from the text model's fields, else from the top level.
void read_token_ids(const Fields& f, const Fields& top, ModelConfig& c);

// The text model's config.json fields that read_hybrid_fields, read_layer_types,
// read_dense_mlp_width and read_token_ids read back (no model_type, no MoE fields).
nlohmann::json hybrid_fields_json(const ModelConfig& c);

// The shape a preset gives: Qwen3.5 / Qwen3-Next proportions scaled down, 3 Gated DeltaNet
// layers to 1 gated-attention layer, partial RoPE on a quarter of the head dimension.
struct HybridSizes {
  int vocab, hidden, layers, intermediate;
  int heads, kv_heads, head_dim;
  int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim;
  double rope_theta;
  int max_positions;
};
void fill_hybrid_preset(const HybridSizes& s, ModelConfig& c);

}  // namespace hypic::model::arch
