// `hypic bench roofline`: the roofline time of a cold prefill per op class, for a config.json
// and a GPU's bf16 peak and memory bandwidth (model/roofline.hpp; docs/gpu.md). No
// measurement: the figure a GPU run is read against.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "hypic/error.hpp"
#include "model/roofline.hpp"

namespace hypic::app {

void add_bench_roofline(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "roofline",
      "Roofline time of a cold prefill per op class (FLOPs, bytes) for a config and a GPU");
  struct Args {
    std::string config, gpu, json;
    int64_t tokens = 32768;
    int chunk = 64;
    double peak_tflops = 0, bandwidth_gbs = 0;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--config", a->config, "a model's config.json")->required();
  sub->add_option("--tokens", a->tokens, "prompt length (nothing cached)")->capture_default_str();
  sub->add_option("--gpu", a->gpu,
                  "a GPU of the built-in table: h100, h100-pcie, h100-nvl, h200, a100, h20");
  sub->add_option("--peak-tflops", a->peak_tflops,
                  "dense bf16 peak in TFLOP/s (overrides --gpu's)");
  sub->add_option("--bandwidth-gbs", a->bandwidth_gbs,
                  "memory bandwidth in GB/s (overrides --gpu's)");
  sub->add_option("--chunk", a->chunk, "the linear-attention family's chunk length")
      ->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] {
    model::GpuPeak gpu{"custom", a->peak_tflops, a->bandwidth_gbs, "given on the command line"};
    if (!a->gpu.empty()) {
      gpu = model::gpu_peak(a->gpu);
      if (a->peak_tflops > 0) gpu.bf16_tflops = a->peak_tflops;
      if (a->bandwidth_gbs > 0) gpu.bandwidth_gbs = a->bandwidth_gbs;
    }
    HYPIC_REQUIRE(gpu.bf16_tflops > 0 && gpu.bandwidth_gbs > 0,
                  "bench roofline: give --gpu NAME, or --peak-tflops and --bandwidth-gbs "
                  "(both positive)");
    const nlohmann::json root = read_json_file(a->config);
    model::ModelConfig cfg;
    try {
      cfg = model::ModelConfig::from_json(root);
    } catch (const Error& e) {
      throw Error(a->config + ": " + e.what());
    }
    model::RooflineOptions o;
    o.tokens = a->tokens;
    o.chunk = a->chunk;
    o.peak_flops = gpu.bf16_tflops * 1e12;
    o.bandwidth = gpu.bandwidth_gbs * 1e9;
    const model::Roofline r = model::prefill_roofline(cfg, o);

    std::printf("roofline of a cold prefill: %s (%s), %d layers, %lld tokens\n",
                model::arch_name(cfg.arch), a->config.c_str(), cfg.num_hidden_layers,
                static_cast<long long>(a->tokens));
    std::printf(
        "GPU: %s (%s): %.0f TFLOP/s dense bf16, %.0f GB/s; bf16 weights and "
        "activations, f32 states\n",
        gpu.name.c_str(), gpu.what.c_str(), gpu.bf16_tflops, gpu.bandwidth_gbs);
    std::printf("%-18s %10s %10s %11s %11s %12s  %s\n", "op class", "TFLOP", "GB", "compute ms",
                "memory ms", "roofline ms", "bound");
    nlohmann::json classes = nlohmann::json::array();
    for (const model::OpClassCost& c : r.classes) {
      std::printf("%-18s %10.3f %10.3f %11.3f %11.3f %12.3f  %s\n", c.name.c_str(), c.flops / 1e12,
                  c.bytes / 1e9, 1e3 * c.flops / o.peak_flops, 1e3 * c.bytes / o.bandwidth,
                  1e3 * c.seconds, c.compute_bound ? "compute" : "memory");
      classes.push_back({{"name", c.name},
                         {"flops", c.flops},
                         {"bytes", c.bytes},
                         {"seconds", c.seconds},
                         {"bound", c.compute_bound ? "compute" : "memory"}});
    }
    std::printf("%-18s %10.3f %10.3f %11.3f %11.3f %12.3f  (sum of the classes' times)\n", "total",
                r.flops / 1e12, r.bytes / 1e9, 1e3 * r.flops / o.peak_flops,
                1e3 * r.bytes / o.bandwidth, 1e3 * r.seconds);
    std::printf("roofline prefill %lld tokens: %.3f s\n", static_cast<long long>(a->tokens),
                r.seconds);
    if (!a->json.empty()) {
      const nlohmann::json j = {{"bench", "roofline"},
                                {"config", a->config},
                                {"architecture", model::arch_name(cfg.arch)},
                                {"layers", cfg.num_hidden_layers},
                                {"tokens", a->tokens},
                                {"chunk", a->chunk},
                                {"gpu", gpu.name},
                                {"peak_tflops", gpu.bf16_tflops},
                                {"bandwidth_gbs", gpu.bandwidth_gbs},
                                {"classes", classes},
                                {"total_flops", r.flops},
                                {"total_bytes", r.bytes},
                                {"roofline_seconds", r.seconds}};
      write_text_file(a->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
