#pragma once
// Shared by the PIC tests: a tiny random model whose linear layers remember. The presets'
// A_log = log U(1, 16) (as transformers initialises it) decays every head by e^-1.3 or
// more per token, so a random model forgets within a few tokens and every caching mode
// looks alike; trained models keep slow heads. Here A = exp U(log 0.005, log 0.1), a
// memory of tens to hundreds of tokens.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/forward.hpp"
#include "model/presets.hpp"

namespace pic_test {

inline hypic::model::Model remembering_tiny_model(const std::string& arch, uint64_t seed) {
  const auto cfg = hypic::model::preset_config(hypic::model::parse_arch(arch), "tiny");
  auto weights = hypic::model::random_weights(cfg, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> log_a(std::log(0.005f), std::log(0.1f));
  for (auto& layer : weights.layers)
    if (layer.kind == hypic::model::LayerKind::Linear)
      for (auto& x : layer.linear.A_log.values()) x = log_a(rng);
  return hypic::model::Model(cfg, std::move(weights));
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace pic_test
