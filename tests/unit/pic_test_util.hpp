#pragma once
// Shared by the PIC tests: a tiny random model whose linear layers remember. The presets'
// A_log = log U(1, 16) (as transformers initialises it) decays every head by e^-1.3 or
// more per token, so a random model forgets within a few tokens and every caching mode
// looks alike; trained models keep slow heads. Here A = exp U(log 0.005, log 0.1), a
// memory of tens to hundreds of tokens.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"

namespace pic_test {

// Where the PIC tests compute, from HYPIC_TEST_DEVICE: unset or "host", the host backend;
// "cuda" (scripts/device_check.sh), the CUDA backend; "fake", the stand-in device of
// fake_device.hpp (device bookkeeping in host memory: checks the tests' own handling of device
// tensors on any machine). Anything else is a test setup error.
inline const hypic::kernels::Backend& test_backend() {
  const char* env = std::getenv("HYPIC_TEST_DEVICE");
  const std::string device = env == nullptr ? "" : env;
  if (device.empty() || device == "host") return hypic::kernels::host_backend();
  if (device == "cuda") return hypic::kernels::cuda_backend();
  if (device == "fake") return fake_device();
  throw hypic::Error("HYPIC_TEST_DEVICE=" + device + ": expected host, cuda or fake");
}

// The model on the host, whatever HYPIC_TEST_DEVICE says (the device plumbing test's reference).
inline hypic::model::Model remembering_tiny_host_model(const std::string& arch, uint64_t seed) {
  const auto cfg = hypic::model::preset_config(hypic::model::parse_arch(arch), "tiny");
  auto weights = hypic::model::random_weights(cfg, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> log_a(std::log(0.005f), std::log(0.1f));
  for (auto& layer : weights.layers)
    if (layer.kind == hypic::model::LayerKind::Linear)
      for (auto& x : layer.linear.A_log.values()) x = log_a(rng);
  return hypic::model::Model(cfg, std::move(weights));
}

// The same model on test_backend().
inline hypic::model::Model remembering_tiny_model(const std::string& arch, uint64_t seed) {
  hypic::model::Model host = remembering_tiny_host_model(arch, seed);
  const hypic::kernels::Backend& be = test_backend();
  if (be.device() == hypic::Device::Host) return host;
  return hypic::model::Model(host.config(), hypic::model::to_backend(host.weights(), be), be);
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace pic_test
