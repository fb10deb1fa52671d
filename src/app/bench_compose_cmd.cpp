// `hypic bench compose`: what position-independent caching costs in a linear layer, per
// architecture (bench/compose.hpp measures; this command parses, calls and reports).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "bench/compose.hpp"
#include "hypic/error.hpp"
#include "model/presets.hpp"

namespace hypic::app {
namespace {

// One measured layer: where its config came from and the figures.
struct ComposeRun {
  std::string source;  // "qwen3_5_moe preset bench" or the config.json path
  bench::ComposeResult result;
};

model::ModelConfig read_config_file(const std::string& path) {
  const nlohmann::json root = read_json_file(path);
  try {
    return model::ModelConfig::from_json(root);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void print_run(const bench::ComposeOptions& a, const ComposeRun& run) {
  const bench::ComposeResult& r = run.result;
  std::printf("\n== %s: layer %d, %s, hidden %d, %d key / %d value heads, dk %d, dv %d\n",
              run.source.c_str(), r.layer, r.layer_kind.c_str(), r.hidden, r.key_heads,
              r.value_heads, r.dk, r.dv);
  std::printf("  segment of %d tokens, junction window %d: T covers the %d cached tokens\n",
              a.tokens, a.junction, a.tokens - a.junction);
  std::printf("  layer forward (plain prefill)                         : %9.3f ms\n",
              1e3 * r.layer_forward_s);
  std::printf("  layer forward capturing T (as compute_entry)          : %9.3f ms\n",
              1e3 * r.layer_forward_with_summary_s);
  std::printf("  recurrence alone / with T                             : %9.3f / %.3f ms\n",
              1e3 * r.recurrence_s, 1e3 * r.recurrence_with_t_s);
  std::printf("  S(R|0) = S_n - T*S_w                                  : %9.3f ms\n", 1e3 * r.s0_s);
  std::printf(
      "  building (T, S) costs %.3f ms = %.2f %% of the layer forward (target <= %.0f %%): %s\n",
      1e3 * r.build_summary_s, r.build_percent_of_layer, bench::kComposeTargetPercent,
      r.build_percent_of_layer <= bench::kComposeTargetPercent ? "met" : "NOT met");
  std::printf("  applying one cached summary (S = T*S_in + S0, all heads): %.3f ms\n",
              1e3 * r.apply_s);
  std::printf("  entry of this layer (T %s + S%s, bf16): %zu bytes, %.0f bytes per cached token\n",
              r.t_form.c_str(), r.conv_values > 0 ? " + conv tail" : "", r.entry_layer_bytes_bf16,
              r.entry_bytes_per_token_bf16);
  if (r.lowrank_max_tokens > 0)
    std::printf(
        "  entries keep T in the WY form (dk + 2*r*dk values per head) up to r = %d "
        "cached tokens, dense above\n",
        r.lowrank_max_tokens);
  std::printf("  bytes per summary (T + S) of this layer, %d cached tokens:\n",
              a.tokens - a.junction);
  std::printf("    %-9s %12s %12s %12s\n", "structure", "f32", "bf16", "f16");
  for (const bench::SummaryBytes& row : r.summary_bytes) {
    std::printf("    %-9s", row.structure.c_str());
    for (const auto& [dtype, bytes] : row.by_dtype) std::printf(" %12zu", bytes);
    std::printf("%s\n", row.chosen ? "  <- kept" : row.exact ? "" : "  (not exact here)");
  }
  if (!r.entry_forms.empty()) {
    std::printf(
        "  per-head forms of T and S (docs/entry-forms.md), bf16 bytes of the layer (T + S + "
        "conv), state error against the dense entry's composition:\n");
    std::printf("    %-10s %6s %6s %6s %6s %6s %6s %6s %12s %12s %7s %10s %10s %10s\n", "tolerance",
                "absent", "scalar", "diag", "lowrk", "dense", "T fp8", "S fp8", "dense B",
                "chosen B", "ratio", "max bound", "state err", "T*S_in/S");
    for (const bench::EntryFormsRow& row : r.entry_forms)
      std::printf(
          "    %-10.3g %6lld %6lld %6lld %6lld %6lld %6lld %6lld %12zu %12zu %7.3f %10.3g %10.3g "
          "%10.3g\n",
          row.tolerance, static_cast<long long>(row.heads[0]), static_cast<long long>(row.heads[1]),
          static_cast<long long>(row.heads[2]), static_cast<long long>(row.heads[3]),
          static_cast<long long>(row.heads[4]), static_cast<long long>(row.heads[5]),
          static_cast<long long>(row.s_fp8_heads), row.dense_bytes_bf16, row.chosen_bytes_bf16,
          static_cast<double>(row.chosen_bytes_bf16) / row.dense_bytes_bf16, row.max_bound,
          row.state_error, row.state_contribution);
  }
}

nlohmann::json run_json(const bench::ComposeOptions& a, const ComposeRun& run) {
  const bench::ComposeResult& r = run.result;
  nlohmann::json bytes = nlohmann::json::object();
  for (const bench::SummaryBytes& row : r.summary_bytes) {
    for (const auto& [dtype, n] : row.by_dtype) bytes[row.structure][dtype] = n;
    bytes[row.structure]["exact"] = row.exact;
    bytes[row.structure]["kept"] = row.chosen;
  }
  nlohmann::json forms = nlohmann::json::array();
  for (const bench::EntryFormsRow& row : r.entry_forms)
    forms.push_back({{"tolerance", row.tolerance},
                     {"heads",
                      {{"absent", row.heads[0]},
                       {"scalar", row.heads[1]},
                       {"diagonal", row.heads[2]},
                       {"lowrank", row.heads[3]},
                       {"dense", row.heads[4]},
                       {"fp8", row.heads[5]}}},
                     {"s_fp8_heads", row.s_fp8_heads},
                     {"dense_bytes_bf16", row.dense_bytes_bf16},
                     {"chosen_bytes_bf16", row.chosen_bytes_bf16},
                     {"max_bound", row.max_bound},
                     {"state_error", row.state_error},
                     {"state_contribution", row.state_contribution}});
  return {{"source", run.source},
          {"arch", r.arch},
          {"layer", r.layer},
          {"layer_kind", r.layer_kind},
          {"tokens", a.tokens},
          {"junction", a.junction},
          {"hidden", r.hidden},
          {"key_heads", r.key_heads},
          {"value_heads", r.value_heads},
          {"dk", r.dk},
          {"dv", r.dv},
          {"layer_forward_ms", 1e3 * r.layer_forward_s},
          {"layer_forward_with_summary_ms", 1e3 * r.layer_forward_with_summary_s},
          {"recurrence_ms", 1e3 * r.recurrence_s},
          {"recurrence_with_T_ms", 1e3 * r.recurrence_with_t_s},
          {"s0_ms", 1e3 * r.s0_s},
          {"build_summary_ms", 1e3 * r.build_summary_s},
          {"build_percent_of_layer", r.build_percent_of_layer},
          {"target_percent", bench::kComposeTargetPercent},
          {"meets_target", r.build_percent_of_layer <= bench::kComposeTargetPercent},
          {"apply_ms", 1e3 * r.apply_s},
          {"t_form", r.t_form},
          {"lowrank_max_tokens", r.lowrank_max_tokens},
          {"entry_layer_bytes_bf16", r.entry_layer_bytes_bf16},
          {"entry_bytes_per_cached_token_bf16", r.entry_bytes_per_token_bf16},
          {"summary_bytes", bytes},
          {"entry_forms", forms}};
}

}  // namespace

void add_bench_compose(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "compose", "Cost of building and applying linear-layer segment summaries, per architecture");
  struct Args {
    bench::ComposeOptions options;
    std::string archs = "qwen3_5_moe,kimi_linear,minimax,bailing_moe_linear";
    std::string preset = "bench";
    std::vector<std::string> configs;
    std::string json, device;
  };
  auto a = std::make_shared<Args>();
  bench::ComposeOptions& o = a->options;
  sub->add_option("--arch", a->archs,
                  "architectures, comma-separated (each at --preset; one linear layer of each)")
      ->capture_default_str();
  sub->add_option("--preset", a->preset, "the architectures' preset (sizes)")
      ->capture_default_str();
  sub->add_option("--config", a->configs,
                  "config.json file(s) of published models instead of --arch/--preset "
                  "(e.g. tests/data/configs/*.json)");
  sub->add_option("--layer", o.layer, "the linear layer's index (-1: the first)")
      ->capture_default_str();
  sub->add_option("--tokens", o.tokens, "segment length")->capture_default_str();
  sub->add_option("--junction", o.junction, "junction window (tokens not cached)")
      ->capture_default_str();
  sub->add_option("--hidden", o.hidden, "override the hidden size (0: the config's)");
  sub->add_option("--key-heads", o.key_heads, "override the linear key heads (0: the config's)");
  sub->add_option("--value-heads", o.value_heads,
                  "override the linear value heads (lightning: the heads; 0: the config's)");
  sub->add_option("--head-dim", o.head_dim, "override the key and value head dim (0: keep)");
  sub->add_option("--reps", o.reps, "timed repetitions (median)")->capture_default_str();
  sub->add_option("--entry-tolerances", o.entry_tolerances,
                  "per-head forms of T at these tolerances (docs/entry-forms.md)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--remembering", o.remembering,
                "Gated DeltaNet decays of a memory of tens to hundreds of tokens (the PIC "
                "tests'), not the initialiser's");
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  add_device_option(sub, a->device);
  on_run(sub, [a] {
    print_device(choose_device(a->device, /*device_path=*/false));  // the host kernels' costs
    std::vector<std::pair<std::string, model::ModelConfig>> configs;
    if (!a->configs.empty()) {
      for (const std::string& path : a->configs) configs.emplace_back(path, read_config_file(path));
    } else {
      for (const std::string& arch : split_list(a->archs))
        configs.emplace_back(arch + " preset " + a->preset,
                             model::preset_config(model::parse_arch(arch), a->preset));
    }
    HYPIC_REQUIRE(!configs.empty(), "bench compose: no architecture given");
    std::vector<ComposeRun> runs;
    for (auto& [source, config] : configs) {
      bench::ComposeOptions options = a->options;
      options.base = config;
      runs.push_back({source, bench::run_compose(options)});
      if (runs.size() == 1) {
        const kernels::BlasInfo& b = runs.front().result.blas;
        std::printf("BLAS: %s, kernel %s, %d thread(s); weights f32, random\n", b.library.c_str(),
                    b.kernel.c_str(), b.threads);
      }
      print_run(a->options, runs.back());
      std::fflush(stdout);
    }
    std::printf("\n%-36s %-17s %10s %10s %8s %14s\n", "summary", "layer", "forward ms", "build ms",
                "share %", "entry B/token");
    for (const ComposeRun& run : runs) {
      const bench::ComposeResult& r = run.result;
      std::printf("%-36s %-17s %10.3f %10.3f %8.2f %14.0f\n", run.source.c_str(),
                  r.layer_kind.c_str(), 1e3 * r.layer_forward_s, 1e3 * r.build_summary_s,
                  r.build_percent_of_layer, r.entry_bytes_per_token_bf16);
    }
    if (!a->json.empty()) {
      nlohmann::json j = {
          {"bench", "compose"},
          {"blas", runs.front().result.blas.library + " " + runs.front().result.blas.kernel},
          {"threads", runs.front().result.blas.threads},
          {"runs", nlohmann::json::array()}};
      for (const ComposeRun& run : runs) j["runs"].push_back(run_json(a->options, run));
      write_text_file(a->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
