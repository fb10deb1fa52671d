#pragma once
// One architecture = one ArchSpec, defined in src/model/arch/<name>.cpp and listed in
// src/model/arch/registry.cpp. Generic code (config, checkpoint, presets, the app) asks a
// model's ArchSpec and never names an architecture itself.
//
// An ArchSpec decides what its config.json holds, how its checkpoint names and lays out the
// tensors that differ between architectures, which layers are MoE, and its named presets.
// What it fills is the one ModelConfig that the layers read (the union of the fields every
// architecture needs); the canonical weights (model/weights.hpp) are the same for all.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic::model {

struct ModelConfig;

// One checkpoint tensor that fills rows of a linear-attention layer's canonical in_proj
// ([q | k | v | z | b | a] x hidden, see model/weights.hpp): row i of the tensor named
// `<prefix>layers.<l>.linear_attn.<name>` is canonical row rows[i].
struct InProjPart {
  std::string name;
  std::vector<int64_t> rows;
};

class ArchSpec {
 public:
  virtual ~ArchSpec() = default;

  // The architecture's name: `--arch`, error messages, store fingerprints.
  virtual const char* name() const = 0;
  // config.json top-level model_type values this architecture reads (its name first).
  virtual std::vector<std::string> model_types() const { return {name()}; }

  // --- config.json
  // Fills `c` from config.json content (c.arch is already this architecture); throws
  // hypic::Error naming the offending field. ModelConfig::from_json validates afterwards.
  virtual void read_config(const nlohmann::json& root, ModelConfig& c) const = 0;
  // A config.json that transformers loads for this architecture.
  virtual nlohmann::json write_config(const ModelConfig& c) const = 0;
  // Checks beyond ModelConfig::validate's generic ones (throws hypic::Error).
  virtual void validate(const ModelConfig&) const {}

  // --- layer plan (layer_types, linear or full attention, is read by read_config / presets)
  // Whether layer `layer` has a mixture-of-experts MLP (else a dense SwiGLU MLP).
  virtual bool layer_is_moe(const ModelConfig& c, int layer) const = 0;

  // --- checkpoint tensors
  // Prefixes of the decoder's tensors ("model." -> model.layers.0...). Saving uses the
  // first; loading uses the first whose embed_tokens.weight the checkpoint holds, else the
  // last.
  virtual std::vector<std::string> weight_prefixes() const = 0;
  // The checkpoint tensors that make up a linear-attention layer's in_proj, with their rows.
  virtual std::vector<InProjPart> linear_in_proj(const ModelConfig& c) const = 0;
  // The checkpoint's name of a tensor hypic names in the Qwen layout (`<prefix>layers.<l>.mlp.
  // experts.<e>.gate_proj.weight`, `...mlp.shared_expert.up_proj.weight`, ...): where an
  // architecture names its MLP / MoE tensors differently (kimi_linear: block_sparse_moe., w1 /
  // w2 / w3, shared_experts.). Loading and saving both go through it.
  virtual std::string tensor_name(const std::string& name) const { return name; }
  // Other names a checkpoint may hold the tensor `name` (as tensor_name gives it) under;
  // loading takes the first present when `name` is not (saving writes `name`).
  virtual std::vector<std::string> tensor_aliases(const std::string&) const { return {}; }
  // Tensor-name prefixes that loading skips without complaint (parts hypic does not run,
  // such as multi-token prediction heads or a vision tower).
  virtual std::vector<std::string> ignored_prefixes() const = 0;
  // Tensor-name suffixes that loading skips: buffers a checkpoint carries that hypic derives
  // from config.json (MiniMax's lightning decay tables).
  virtual std::vector<std::string> ignored_suffixes() const { return {}; }
  // Per expert, the names of its gate, up and down projections (Mixtral-style checkpoints:
  // w1, w3, w2).
  virtual std::vector<std::string> expert_projections() const {
    return {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  }
  // Whether saving writes the experts as fused stacks (mlp.experts.gate_up_proj [E, 2I, H],
  // mlp.experts.down_proj [E, H, I]) rather than one tensor per expert: true where
  // transformers knows no per-expert form of the architecture. Loading reads either.
  virtual bool saves_fused_experts() const { return false; }
  // Bailing's tensor names and layouts (bailing_moe_linear): model.word_embeddings, per
  // layer attention.query_key_value (fused q|k|v rows), attention.dense,
  // attention.query_layernorm / key_layernorm, and in RingLinear layers attention.g_proj /
  // g_norm (model/layers_ring.hpp).
  virtual bool bailing_layout() const { return false; }
  // Names of an MoE layer's tensors, relative to "<prefix>layers.<i>.", where architectures
  // differ (defaults: Qwen's). An empty name: the architecture has no such tensor (then the
  // config must agree: no shared expert means shared_expert_intermediate_size == 0).
  struct MoeNames {
    std::string block = "mlp.";                             // the MoE block
    std::string router_bias;                                // e.g. "gate.e_score_correction_bias"
    std::string shared = "shared_expert.";                  // the shared expert's SwiGLU
    std::string shared_gate = "shared_expert_gate.weight";  // its sigmoid gate
  };
  virtual MoeNames moe_names() const { return {}; }
  // Lets the checkpoint settle what config.json leaves open, given the raw config.json and
  // the names of the tensors the checkpoint holds.
  virtual void adjust_loaded_config(const nlohmann::json& /*raw*/,
                                    const std::set<std::string>& /*tensors*/,
                                    ModelConfig& /*c*/) const {}

  // --- presets (`hypic model init --arch <name> --preset <preset>`)
  virtual std::vector<std::string> preset_names() const = 0;
  // Fills `c` (c.arch is already set) for `preset`, one of preset_names().
  virtual void fill_preset(const std::string& preset, ModelConfig& c) const = 0;
};

// --- the registry (registry.cpp)

// Every registered architecture, in registration order.
const std::vector<const ArchSpec*>& architectures();
// Names of the registered architectures, comma separated ("qwen3_next, qwen3_5").
std::string supported_architectures();
// The architecture that reads config.json's model_type, or nullptr.
const ArchSpec* arch_for_model_type(const std::string& model_type);
// The architecture named `name` (`--arch`); throws hypic::Error listing the supported ones.
const ArchSpec& parse_arch(const std::string& name);

}  // namespace hypic::model
