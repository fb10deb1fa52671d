#pragma once
// The identity of a model for the segment store. An entry computed by one model must never
// be composed into another, so the store records the fingerprint of the model that made it
// and refuses any other.
#include <string>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace hypic::pic {

// "<arch>-<config hash>-<weights hash>": FNV-1a 128 of config.json's canonical text
// (keys sorted, as ModelConfig::to_json() writes it) and of the CRC32C of every weight
// tensor in a fixed order with its shape. Reads each weight byte once (CRC32C runs at
// several GB/s), so it is computed at load time.
std::string model_fingerprint(const model::ModelConfig& config, const model::ModelWeights& weights);

}  // namespace hypic::pic
