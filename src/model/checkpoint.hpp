#pragma once
// Hugging Face model folders <-> hypic's canonical weights.
//
// A folder holds config.json and model.safetensors (or shards listed in
// model.safetensors.index.json). Loading checks every tensor the config implies for
// presence and exact shape, refuses tensors hypic does not know (except those under the
// architecture's ignored prefixes, see model/arch/arch.hpp), converts to f32 and to the
// canonical layout of model/weights.hpp.
// Saving writes exactly the Hugging Face layout (the inverse conversion), so
// transformers' AutoModelForCausalLM loads the result with no missing or unexpected keys.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace hypic::model {

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
  std::string dir;
  std::string dtype;               // checkpoint dtype of the weights: "bf16", "f32", "f16" or
                                   // "mixed(bf16,f32)" when they differ
  uint64_t checkpoint_bytes = 0;   // bytes of weight data read from the checkpoint
  std::string weights_dtype;       // the projections in memory: "bf16" or "f32"
  uint64_t peak_memory_bytes = 0;  // the process's peak resident memory right after loading
  bool sharded = false;
  std::vector<std::string> ignored;  // tensor names skipped under an ignorable prefix
};

// Reads dir/config.json (errors name the file and the field).
ModelConfig load_config(const std::string& dir);

// The dtype the projection matrices are kept in (weights.hpp): auto keeps them as the
// checkpoint stores them (bf16 when all are bf16, else f32); bf16 rounds f32 ones.
enum class WeightsDType { Auto, F32, BF16 };
WeightsDType parse_weights_dtype(const std::string& s);  // "auto", "f32", "bf16"
// The process-wide choice (`--weights-dtype`, every command) that load_checkpoint(dir) uses.
void set_default_weights_dtype(WeightsDType d);
WeightsDType default_weights_dtype();

// Loads config and weights; throws hypic::Error (one line) on any mismatch. The files are
// memory-mapped and converted one tensor at a time, so the peak is about the weights in memory
// plus one tensor.
LoadedModel load_checkpoint(const std::string& dir);
LoadedModel load_checkpoint(const std::string& dir, WeightsDType weights_dtype);

// Every tensor of the config's canonical layout, zeros, the projection matrices in
// `matrix_dtype` (f32 or bf16): what load_checkpoint fills (and what op counts run on).
ModelWeights zero_weights(const ModelConfig& c, DType matrix_dtype);

// The process's peak resident memory so far (VmHWM, else getrusage), in bytes.
uint64_t peak_resident_bytes();
// One line for run headers: weights dtype and bytes in memory, the checkpoint's, and the peak.
std::string load_summary(const LoadedModel& m);

// Writes dir/config.json and dir/model.safetensors in `dtype` (F32, BF16 or F16). With
// max_shard_bytes > 0 the weights are split into model-0000i-of-0000n.safetensors files
// plus model.safetensors.index.json, as transformers' save_pretrained does.
void save_checkpoint(const std::string& dir, const ModelConfig& config, const ModelWeights& weights,
                     DType dtype, uint64_t max_shard_bytes = 0);

// One tensor of the Hugging Face layout the config implies.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
};
// Every tensor of the config's Hugging Face layout, in a fixed order, under the
// architecture's first weight prefix (e.g. Qwen3.5's `model.language_model.`); experts are
// listed one by one (`mlp.experts.<e>.{gate,up,down}_proj.weight`). save_checkpoint writes
// these, except that an architecture whose checkpoints fuse the experts
// (ArchSpec::saves_fused_experts) gets them as the two stacks per layer.
std::vector<HfTensor> hf_tensor_layout(const ModelConfig& config);
// The number of parameters of that layout, counted from shapes alone (experts as stacks: no
// per-expert list, whatever num_experts is); throws hypic::Error above 2^50 parameters.
uint64_t hf_parameter_count(const ModelConfig& config);

// config.json files larger than this are refused before they are read (docs/input-checks.md).
inline constexpr uint64_t kMaxConfigFileBytes = 16ull << 20;
// Throws hypic::Error when the file at `path` is larger than kMaxConfigFileBytes.
void check_config_file_size(const std::string& path);

// Canonical weights assembled from Hugging Face tensors: `produce` is called once for
// each entry of hf_tensor_layout(config), in order, and must return that shape. The
// loader and the random initialiser both build weights through this one conversion.
ModelWeights weights_from_hf(const ModelConfig& config,
                             const std::function<Tensor(const HfTensor&)>& produce);

}  // namespace hypic::model
