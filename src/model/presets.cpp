// Preset configs (their sizes are the architecture's, src/model/arch/) and deterministic
// random initialisation.
#include "model/presets.hpp"

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hypic/error.hpp"
#include "model/checkpoint.hpp"

namespace hypic::model {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The initial values of one Hugging Face tensor, chosen from its name:
//  - projections: N(0, 1/fan_in) so that each layer's activations stay O(1); projections
//    back into the residual stream are further scaled by 1/sqrt(2·layers);
//  - embeddings N(0, 1) (tied: N(0, hidden^-1/2)), lm_head N(0, 1/hidden);
//  - zero-centred RMSNorm weights (applied as 1 + w) small around 0; plain weights (the
//    gated norm's, and every norm of a model without zero-centred norms: MiniMax's, Ring's,
//    Kimi's) around 1;
//  - conv1d N(0, 1/K); dt_bias 1 (as transformers initialises it; KDA's: inverse softplus
//    of a log-uniform step in [1e-3, 1e-1], as FLA's);
//    A_log = log(U(1, 16)).
Tensor init_tensor(const ModelConfig& c, const HfTensor& t, uint64_t seed) {
  NormalRng rng(splitmix64(seed ^ splitmix64(fnv1a(t.name))));
  Tensor out(t.shape);
  const std::string& n = t.name;
  auto fill_normal = [&](double mean, double std) {
    for (int64_t i = 0; i < out.numel(); ++i)
      out[i] = static_cast<float>(mean + std * rng.normal());
  };
  const double fan_in = static_cast<double>(t.shape.back());
  const double residual_scale = 1.0 / std::sqrt(2.0 * c.num_hidden_layers);
  if (ends_with(n, "embed_tokens.weight") || ends_with(n, "word_embeddings.weight")) {
    // Tied embeddings also produce the logits; hidden^-1/4 keeps both the input scale and
    // the logit spread moderate.
    fill_normal(0.0, c.tie_word_embeddings ? std::pow(c.hidden_size, -0.25) : 1.0);
  } else if (n == "lm_head.weight") {
    fill_normal(0.0, 1.0 / std::sqrt(static_cast<double>(c.hidden_size)));
  } else if (ends_with(n, "linear_attn.norm.weight") ||
             (!c.zero_centred_norm && ends_with(n, "norm.weight"))) {
    // plain (not zero-centred) RMSNorm weights
    fill_normal(1.0, 0.05);
  } else if (ends_with(n, "norm.weight")) {              // input/post-attention/final/q/k norms
    fill_normal(c.zero_centred_norm ? 0.0 : 1.0, 0.05);  // plain weights (MiniMax) around 1
  } else if (ends_with(n, "conv1d.weight")) {
    fill_normal(0.0, 1.0 / std::sqrt(static_cast<double>(c.linear_conv_kernel_dim)));
  } else if (ends_with(n, "self_attn.dt_bias")) {
    // KDA (kimi_linear), as transformers / FLA initialise it: the inverse softplus of a step
    // dt log-uniform in [1e-3, 1e-1], so the per-channel decays span slow to fast.
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double dt =
          std::exp(std::log(1e-3) + rng.uniform() * (std::log(1e-1) - std::log(1e-3)));
      out[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
    }
  } else if (ends_with(n, "dt_bias")) {
    for (int64_t i = 0; i < out.numel(); ++i) out[i] = 1.0f;
  } else if (ends_with(n, "A_log")) {
    for (int64_t i = 0; i < out.numel(); ++i)
      out[i] = static_cast<float>(std::log(1.0 + 15.0 * rng.uniform()));
  } else if (ends_with(n, "out_proj.weight") || ends_with(n, "o_proj.weight") ||
             ends_with(n, "down_proj.weight") || ends_with(n, ".w2.weight") ||
             ends_with(n, "attention.dense.weight")) {
    fill_normal(0.0, residual_scale / std::sqrt(fan_in));
  } else {
    fill_normal(0.0, 1.0 / std::sqrt(fan_in));
  }
  return out;
}

}  // namespace

double NormalRng::uniform() {
  return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

// Marsaglia's polar method: only sqrt (exact in IEEE arithmetic) and log are needed.
double NormalRng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double f = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * f;
  has_spare_ = true;
  return u * f;
}

ModelConfig preset_config(const ArchSpec& arch, const std::string& preset) {
  const std::vector<std::string> names = arch.preset_names();
  if (std::find(names.begin(), names.end(), preset) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error("unknown preset '" + preset + "' (supported: " + list + ")");
  }
  ModelConfig c;
  c.arch = &arch;
  arch.fill_preset(preset, c);
  c.validate();
  return c;
}

ModelWeights random_weights(const ModelConfig& config, uint64_t seed) {
  config.validate();
  // Float32 weights that cannot fit the machine's memory are refused before any allocation.
  const uint64_t params = hf_parameter_count(config);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    const double have = static_cast<double>(pages) * static_cast<double>(page);
    const double need = static_cast<double>(params) * 4.0;
    if (need > have) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "config: %.3g parameters need %.3g GB as float32, more than this machine's "
                    "%.3g GB of memory",
                    static_cast<double>(params), need / 1e9, have / 1e9);
      throw Error(buf);
    }
  }
  return weights_from_hf(config, [&](const HfTensor& t) { return init_tensor(config, t, seed); });
}

Tensor random_tensor(const ModelConfig& config, const HfTensor& t, uint64_t seed) {
  return init_tensor(config, t, seed);
}

uint64_t config_parameter_count(const ModelConfig& config) {
  return hf_parameter_count(config);
}

uint64_t config_active_parameter_count(const ModelConfig& config) {
  uint64_t n = config_parameter_count(config);
  if (config.num_experts <= 0) return n;
  const uint64_t per_expert = 3ull * static_cast<uint64_t>(config.hidden_size) *
                              static_cast<uint64_t>(config.moe_intermediate_size);
  for (int i = 0; i < config.num_hidden_layers; ++i)
    if (config.layer_is_moe(i))
      n -= per_expert * static_cast<uint64_t>(config.num_experts - config.num_experts_per_tok);
  return n;
}

}  // namespace hypic::model
