#pragma once
// Named model sizes for random initialisation (`hypic model init`), and the
// deterministic random initialiser itself.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace hypic::model {

// One of the architecture's presets (arch.preset_names(): "tiny" for tests, "small" for
// demos, "bench" for performance); throws hypic::Error naming the supported ones otherwise.
// parse_arch (model/arch/arch.hpp) finds an architecture by name.
ModelConfig preset_config(const ArchSpec& arch, const std::string& preset);

// Random weights for `config`, identical for a given seed on every platform: each tensor
// draws from its own std::mt19937_64 stream seeded from (seed, tensor name), and normal
// variates come from hypic's own Marsaglia polar method, not std::normal_distribution.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed);
// One tensor of the config's layout with the values random_weights gives it: for building a
// single layer at a real model's sizes (bench compose) without the whole model.
struct HfTensor;
Tensor random_tensor(const ModelConfig& config, const HfTensor& t, uint64_t seed);

// Parameters the config implies (every tensor of the checkpoint), and those used per token
// (MoE layers count only the routed top-k experts).
uint64_t config_parameter_count(const ModelConfig& config);
uint64_t config_active_parameter_count(const ModelConfig& config);

// A deterministic N(0,1) generator on top of std::mt19937_64 (exposed for tests).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : engine_(seed) {}
  double uniform();  // [0, 1), 53 random bits
  double normal();

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace hypic::model
