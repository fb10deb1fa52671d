#include "bench/forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "bench/blas.hpp"
#include "bench/peak.hpp"
#include "bench/timing.hpp"
#include "common/files.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/device.hpp"
#include "hypic/kernels/threads.hpp"
#include "hypic/tensor.hpp"
#include "model/checkpoint.hpp"
#include "model/forward.hpp"

namespace hypic::bench {
namespace {

// GFLOP/s of n×n×n products on a device backend: cuBLAS sgemm, or bf16 inputs with f32
// accumulation (tensor cores). Median of `reps` after one warm-up; the device is synchronised
// around each product.
double device_gemm_gflops(const kernels::Backend& be, int n, int reps, bool bf16) {
  HYPIC_REQUIRE(n > 0 && reps > 0, "gemm benchmark: the size and the repetitions must be positive");
  const size_t nn = size_t(n) * n;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> host(nn);
  for (auto& x : host) x = u(rng);
  const Tensor a32 = Tensor::from_vector({int64_t(nn)}, host).to(be.device(), &be);
  Tensor a16({int64_t(nn)}, DType::BF16, Device::Host);
  auto* p = static_cast<uint16_t*>(a16.raw());
  for (size_t i = 0; i < nn; ++i) {  // truncation to bf16 is enough for a rate
    uint32_t bits;
    std::memcpy(&bits, &host[i], sizeof(bits));
    p[i] = static_cast<uint16_t>(bits >> 16);
  }
  const Tensor b16 = a16.to(be.device(), &be);
  Tensor c({int64_t(nn)}, DType::F32, be.device(), &be);
  auto run = [&] {
    if (bf16)
      kernels::cuda::gemm_bf16(false, true, n, n, n, 1.0f, static_cast<const uint16_t*>(b16.raw()),
                               n, static_cast<const uint16_t*>(b16.raw()), n, 0.0f,
                               static_cast<float*>(c.raw()), n);
    else
      be.gemm(false, true, n, n, n, 1.0f, static_cast<const float*>(a32.raw()), n,
              static_cast<const float*>(a32.raw()), n, 0.0f, static_cast<float*>(c.raw()), n);
    be.synchronize();
  };
  return 2.0 * n * double(n) * n / median_seconds(reps, run) / 1e9;
}

// Random weights of a config file's shape, cut to `layers` layers (> 0): every value uniform
// with the scale of its fan-in (norm weights 0 around their 1, dt_bias 1, A_log log 2), from a
// counter hash, so tens of GB fill in seconds.
model::ModelWeights shape_weights(const std::string& file, int layers, int& config_layers,
                                  model::ModelConfig& cfg) {
  nlohmann::json j;
  {
    const std::string text = read_regular_file(file, "--config");
    try {
      j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      throw Error("--config " + file + ": not JSON (" + e.what() + ")");
    }
  }
  cfg = model::ModelConfig::from_json(j);
  config_layers = cfg.num_hidden_layers;
  HYPIC_REQUIRE(layers >= 0 && layers <= cfg.num_hidden_layers,
                "--layers " + std::to_string(layers) + ": the config has " +
                    std::to_string(cfg.num_hidden_layers) + " layers");
  if (layers > 0) {
    cfg.num_hidden_layers = layers;
    cfg.layer_types.resize(static_cast<size_t>(layers));
  }
  cfg.validate();
  uint64_t counter = 0;
  return model::weights_from_hf(cfg, [&](const model::HfTensor& t) {
    Tensor out(t.shape);
    auto ends = [&](const char* s) {
      const size_t n = std::strlen(s);
      return t.name.size() >= n && t.name.compare(t.name.size() - n, n, s) == 0;
    };
    float fixed = 0.0f;
    bool constant = true;
    if (ends("dt_bias") || ends("linear_attn.norm.weight")) {
      fixed = 1.0f;
    } else if (ends("A_log")) {
      fixed = 0.6931472f;
    } else if (!ends("norm.weight")) {
      constant = false;
    }
    float* p = out.data();
    const int64_t n = out.numel();
    if (constant) {
      std::fill(p, p + n, fixed);
      return out;
    }
    const float scale = std::sqrt(3.0f / static_cast<float>(t.shape.back()));
    for (int64_t i = 0; i < n; ++i) {
      uint64_t z = (++counter) * 0x9E3779B97F4A7C15ull;  // splitmix64
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      p[i] = scale * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    }
    return out;
  });
}

}  // namespace

ForwardResult run_forward(const std::string& model_dir, const ForwardOptions& o) {
  HYPIC_REQUIRE(o.tokens > 0 && o.reps > 0, "--tokens and --reps must be positive");
  ForwardResult r;
  r.blas = kernels::blas_info();
  const kernels::Backend& be = o.backend != nullptr ? *o.backend : kernels::host_backend();
  if (be.device() == Device::Host) {
    r.sgemm_gflops = measure_sgemm_gflops(o.sgemm_n, o.sgemm_reps);
  } else {
    r.device = "cuda";
    const int n = std::max(o.sgemm_n, 4096);  // large enough to fill a GPU
    r.sgemm_gflops = device_gemm_gflops(be, n, o.sgemm_reps, false);
    r.bf16_gemm_gflops = device_gemm_gflops(be, n, o.sgemm_reps, true);
  }

  model::ModelConfig loaded_config;
  model::ModelWeights loaded_weights;
  if (o.config_file.empty()) {
    auto loaded = model::load_checkpoint(model_dir);
    r.weights_dtype = loaded.weights_dtype;
    r.load_summary = model::load_summary(loaded);
    r.peak_memory_bytes = double(loaded.peak_memory_bytes);
    loaded_config = std::move(loaded.config);
    loaded_weights = std::move(loaded.weights);
  } else {
    loaded_weights = shape_weights(o.config_file, o.layers, r.config_layers, loaded_config);
    r.weights_dtype = "f32";
    r.load_summary = "weights: random, f32, from " + o.config_file;
  }
  r.config = loaded_config;
  const model::ModelConfig& cfg = r.config;
  model::Model net(std::move(loaded_config), model::to_backend(std::move(loaded_weights), be), be);
  r.weights_bytes = double(net.weights().bytes());
  r.parameter_count = double(net.weights().parameter_count());

  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<int32_t> ids(static_cast<size_t>(o.tokens));
  for (auto& t : ids) t = tok(rng);

  const int threads_before = kernels::threads();
  const std::vector<int> counts = o.threads.empty() ? std::vector<int>{threads_before} : o.threads;
  for (int count : counts) {
    HYPIC_REQUIRE(count > 0, "--threads: thread counts must be positive");
    kernels::set_threads(count);
    model::ForwardTimes parts;
    r.prefill_seconds.clear();
    for (int run = 0; run <= o.reps; ++run) {  // run 0 warms up
      auto cache = net.new_cache();
      net.times().clear();
      const auto t0 = Clock::now();
      const Tensor logits = net.prefill(ids, cache, model::LogitsMode::Last);
      const double dt = seconds_since(t0);
      if (run == o.reps)  // outside the timed region; a NaN on the way nearly always reaches them
        for (const float x : logits.to_vector())
          r.logits_finite = r.logits_finite && std::isfinite(x);
      if (run > 0) r.prefill_seconds.push_back(dt);
      if (run == 1) parts = net.times();
      r.cache_bytes = double(cache.bytes());
    }
    ForwardAtThreads at;
    at.threads = count;
    at.prefill_seconds_median = median(r.prefill_seconds);
    at.parts_total = parts.total();
    at.seconds_by_part = {{"gdn_proj", parts.gdn_proj},       {"gdn_conv", parts.gdn_conv},
                          {"gdn_rule", parts.gdn_rule},       {"gdn_out", parts.gdn_out},
                          {"attn_proj", parts.attn_proj},     {"attn_core", parts.attn_core},
                          {"attn_out", parts.attn_out},       {"mlp", parts.mlp},
                          {"moe_experts", parts.moe_experts}, {"moe_shared", parts.moe_shared},
                          {"norms", parts.embed_norms},       {"lm_head", parts.lm_head}};
    r.by_threads.push_back(std::move(at));
  }
  kernels::set_threads(threads_before);
  const ForwardAtThreads& last = r.by_threads.back();
  const double t = last.prefill_seconds_median;
  r.prefill_seconds_median = t;
  r.tokens_per_second = o.tokens / t;
  r.flops = model::prefill_flops(cfg, o.tokens, 0, 1);
  r.achieved_gflops = r.flops.total() / t / 1e9;
  r.fraction_of_sgemm = r.achieved_gflops / r.sgemm_gflops;
  if (r.device == "cpu") {
    r.cpu_model = kernels::cpu_model();
    r.isa = kernels::cpu_isa_summary();
    const F32Peak peak = measure_f32_peak(last.threads);
    r.f32_peak_loop = peak.loop;
    r.f32_peak_gflops = peak.gflops;
    if (peak.gflops > 0) r.fraction_of_peak = r.achieved_gflops / peak.gflops;
  }
  r.parts_total = last.parts_total;
  r.seconds_by_part = last.seconds_by_part;
  return r;
}

}  // namespace hypic::bench
