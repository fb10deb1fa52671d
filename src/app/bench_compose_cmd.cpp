// `hypic bench compose`: what position-independent caching costs in a linear layer
// (bench/compose.hpp measures; this command parses, calls and reports).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "bench/compose.hpp"
#include "model/presets.hpp"

namespace hypic::app {
namespace {

void print_compose(const bench::ComposeOptions& a, const bench::ComposeResult& r) {
  std::printf("BLAS: %s, kernel %s, %d thread(s)\n", r.blas.library.c_str(), r.blas.kernel.c_str(),
              r.blas.threads);
  std::printf("GDN layer: hidden %d, %d key / %d value heads of %d, segment of %d tokens\n",
              a.hidden, a.key_heads, a.value_heads, a.head_dim, a.tokens);
  std::printf("  layer forward (proj, conv, delta rule, norm, out_proj): %8.3f ms\n",
              1e3 * r.layer_forward_s);
  std::printf("  delta rule alone                                      : %8.3f ms\n",
              1e3 * r.delta_rule_s);
  std::printf("  delta rule + transition operator T                    : %8.3f ms\n",
              1e3 * r.delta_rule_with_t_s);
  std::printf("  building (T, S) costs %.3f ms = %.2f %% of the layer forward (target <= 7 %%)\n",
              1e3 * r.build_summary_s, r.build_percent_of_layer);
  std::printf("  applying one cached summary (S = T*S_in + S0, all heads): %.3f ms\n",
              1e3 * r.apply_s);
  std::printf("bytes per cached summary of one layer (T + S), %d-token segment:\n", a.tokens);
  std::printf("  %-9s %12s %12s %12s\n", "structure", "f32", "bf16", "f16");
  for (const bench::SummaryBytes& row : r.summary_bytes) {
    std::printf("  %-9s", row.structure.c_str());
    for (const auto& [dtype, bytes] : row.by_dtype) std::printf(" %12zu", bytes);
    std::printf("\n");
  }
}

nlohmann::json compose_json(const bench::ComposeOptions& a, const bench::ComposeResult& r) {
  nlohmann::json bytes = nlohmann::json::object();
  for (const bench::SummaryBytes& row : r.summary_bytes)
    for (const auto& [dtype, n] : row.by_dtype) bytes[row.structure][dtype] = n;
  return {{"bench", "compose"},
          {"tokens", a.tokens},
          {"hidden", a.hidden},
          {"key_heads", a.key_heads},
          {"value_heads", a.value_heads},
          {"head_dim", a.head_dim},
          {"layer_forward_ms", 1e3 * r.layer_forward_s},
          {"delta_rule_ms", 1e3 * r.delta_rule_s},
          {"delta_rule_with_T_ms", 1e3 * r.delta_rule_with_t_s},
          {"build_summary_ms", 1e3 * r.build_summary_s},
          {"build_percent_of_layer", r.build_percent_of_layer},
          {"apply_ms", 1e3 * r.apply_s},
          {"summary_bytes", bytes},
          {"blas", r.blas.library + " " + r.blas.kernel}};
}

}  // namespace

void add_bench_compose(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "compose", "Cost of building and applying linear-layer segment summaries (Gated DeltaNet)");
  struct Args {
    bench::ComposeOptions options;
    std::string json, device;
  };
  auto a = std::make_shared<Args>();
  bench::ComposeOptions& o = a->options;
  sub->add_option("--tokens", o.tokens, "segment length")->capture_default_str();
  sub->add_option("--hidden", o.hidden, "hidden size of the layer")->capture_default_str();
  sub->add_option("--key-heads", o.key_heads, "linear key heads")->capture_default_str();
  sub->add_option("--value-heads", o.value_heads, "linear value heads")->capture_default_str();
  sub->add_option("--head-dim", o.head_dim, "key and value head dim")->capture_default_str();
  sub->add_option("--reps", o.reps, "timed repetitions (median)")->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  add_device_option(sub, a->device);
  on_run(sub, [a] {
    print_device(choose_device(a->device, /*device_path=*/false));  // the host kernels' costs
    // One linear layer of Qwen3-Next / Qwen3.5 proportions (defaults: Qwen3-Next-80B's).
    a->options.base = model::preset_config(model::parse_arch("qwen3_5"), "tiny");
    const bench::ComposeResult r = bench::run_compose(a->options);
    print_compose(a->options, r);
    if (!a->json.empty()) {
      write_text_file(a->json, compose_json(a->options, r).dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
