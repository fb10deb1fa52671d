// `hypic bench …`: benchmarks that print medians and ratios measured in one run, and write
// their figures to --json FILE. The measurements live in src/bench; these commands parse,
// call and report.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "app/run_options.hpp"
#include "bench/blas.hpp"
#include "bench/forward.hpp"
#include "bench/peak.hpp"
#include "cluster/world.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/cpu.hpp"

namespace hypic::app {
// bench_roofline_cmd.cpp (declared here, not in commands.hpp, which every command file includes)
void add_bench_roofline(CLI::App& bench);
void add_bench_store(CLI::App& bench);  // bench_store_cmd.cpp

namespace {

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  write_text_file(path, j.dump(2) + "\n");
  std::printf("figures written to %s\n", path.c_str());
}

struct ForwardArgs {
  std::string model, json, device;
  bench::ForwardOptions options;
};

void print_forward(const ForwardArgs& a, const bench::ForwardResult& r, double peak) {
  const auto& b = r.blas;
  const model::ModelConfig& cfg = r.config;
  const double total_bytes = r.weights_bytes + r.cache_bytes;
  const double t = r.prefill_seconds_median;
  std::printf("BLAS: %s, kernel %s, one thread per GEMM tile%s%s\n", b.library.c_str(),
              b.kernel.c_str(), b.note.empty() ? "" : "; ", b.note.c_str());
  std::printf("%s\n", threads_header().c_str());
  if (r.device == "cpu")
    std::printf("sgemm %d^3 (same process, same threads): %.1f GFLOP/s\n", a.options.sgemm_n,
                r.sgemm_gflops);
  else
    std::printf(
        "on the GPU: cuBLAS sgemm %.1f GFLOP/s, bf16 GEMM (f32 accumulation) %.1f GFLOP/s\n",
        r.sgemm_gflops, r.bf16_gemm_gflops);
  std::printf("model: %s, %d layers, %.1f M parameters (%s projections, %.0f MiB)\n",
              model::arch_name(cfg.arch), cfg.num_hidden_layers, r.parameter_count / 1e6,
              r.weights_dtype.c_str(), r.weights_bytes / 1048576);
  std::printf("%s\n", r.load_summary.c_str());
  std::printf("prefill %d tokens: median %.3f s over %d runs -> %.0f tokens/s\n", a.options.tokens,
              t, a.options.reps, r.tokens_per_second);
  std::printf("logits of the last run: %s\n",
              r.logits_finite ? "finite" : "NOT FINITE (NaN or infinity)");
  if (r.config_layers > 0)
    std::printf(
        "random weights of %s, %d of its %d layers: scaled to %d layers, prefill %d tokens "
        "%.3f s (x %d/%d)\n",
        a.options.config_file.c_str(), cfg.num_hidden_layers, r.config_layers, r.config_layers,
        a.options.tokens, t * r.config_layers / cfg.num_hidden_layers, r.config_layers,
        cfg.num_hidden_layers);
  std::printf(
      "achieved %.1f GFLOP/s = %.0f %% of sgemm (%.2f TFLOP counted: proj %.2f, "
      "attention %.2f, delta rule %.2f)\n",
      r.achieved_gflops, 100.0 * r.fraction_of_sgemm, r.flops.total() / 1e12,
      r.flops.projections / 1e12, r.flops.attention / 1e12, r.flops.delta_rule / 1e12);
  if (r.f32_peak_gflops > 0)
    std::printf(
        "achieved = %.0f %% of the f32 FMA peak (%s loop at %d thread(s): %.1f GFLOP/s; sgemm "
        "%.0f %% of it) on %s\n",
        100.0 * r.fraction_of_peak, r.f32_peak_loop.c_str(), r.by_threads.back().threads,
        r.f32_peak_gflops, 100.0 * r.sgemm_gflops / r.f32_peak_gflops, r.cpu_model.c_str());
  if (r.bf16_gemm_gflops > 0)
    std::printf("achieved = %.0f %% of the bf16 GEMM rate\n",
                100.0 * r.achieved_gflops / r.bf16_gemm_gflops);
  std::printf("peak memory %.0f MiB = %.2f x (weights + caches %.0f MiB)\n", peak / 1048576,
              peak / total_bytes, total_bytes / 1048576);
  std::printf("time by part (first timed run, %% of %.3f s):", r.parts_total);
  for (const auto& [name, sec] : r.seconds_by_part)
    if (sec > 0)
      std::printf(" %s %.1f", name.c_str(), 100.0 * sec / std::max(r.parts_total, 1e-12));
  std::printf("\n");
  if (r.by_threads.size() < 2) return;
  // Per part at each thread count, speed-ups over the first count.
  const auto& first = r.by_threads.front();
  std::printf("%-12s %6s", "part", "share");
  for (const auto& at : r.by_threads)
    std::printf(" %9s", ("t@" + std::to_string(at.threads) + " ms").c_str());
  for (size_t c = 1; c < r.by_threads.size(); ++c)
    std::printf(" %7s", ("x@" + std::to_string(r.by_threads[c].threads)).c_str());
  std::printf("\n");
  for (size_t i = 0; i < first.seconds_by_part.size(); ++i) {
    const double t1 = first.seconds_by_part[i].second;
    if (t1 <= 0) continue;
    std::printf("%-12s %5.1f%%", first.seconds_by_part[i].first.c_str(),
                100.0 * t1 / std::max(first.parts_total, 1e-12));
    for (const auto& at : r.by_threads) std::printf(" %9.1f", 1e3 * at.seconds_by_part[i].second);
    for (size_t c = 1; c < r.by_threads.size(); ++c)
      std::printf(" %6.2fx", t1 / std::max(r.by_threads[c].seconds_by_part[i].second, 1e-12));
    std::printf("\n");
  }
  std::printf("%-12s %5.1f%%", "prefill", 100.0);
  for (const auto& at : r.by_threads) std::printf(" %9.1f", 1e3 * at.prefill_seconds_median);
  for (size_t c = 1; c < r.by_threads.size(); ++c)
    std::printf(" %6.2fx", first.prefill_seconds_median /
                               std::max(r.by_threads[c].prefill_seconds_median, 1e-12));
  std::printf("\n");
}

nlohmann::json forward_json(const ForwardArgs& a, const bench::ForwardResult& r, double peak) {
  nlohmann::json breakdown;
  for (const auto& [name, sec] : r.seconds_by_part) breakdown[name] = sec;
  nlohmann::json by_threads = nlohmann::json::array();
  for (const auto& at : r.by_threads) {
    nlohmann::json parts;
    for (const auto& [name, sec] : at.seconds_by_part) parts[name] = sec;
    by_threads.push_back({{"threads", at.threads},
                          {"prefill_seconds_median", at.prefill_seconds_median},
                          {"seconds_by_part", parts}});
  }
  return {
      {"bench", "forward"},
      {"model", a.model.empty() ? a.options.config_file : a.model},
      {"layers", r.config.num_hidden_layers},
      {"config_layers", r.config_layers},
      {"prefill_seconds_scaled_to_config",
       r.config_layers > 0 ? r.prefill_seconds_median * r.config_layers / r.config.num_hidden_layers
                           : r.prefill_seconds_median},
      {"tokens", a.options.tokens},
      {"runs", a.options.reps},
      {"prefill_seconds_median", r.prefill_seconds_median},
      {"tokens_per_second", r.tokens_per_second},
      {"logits_finite", r.logits_finite},
      {"flops_counted", r.flops.total()},
      {"achieved_gflops", r.achieved_gflops},
      {"device", r.device},
      {"sgemm_gflops", r.sgemm_gflops},
      {"bf16_gemm_gflops", r.bf16_gemm_gflops},
      {"fraction_of_sgemm", r.fraction_of_sgemm},
      {"cpu_model", r.cpu_model},
      {"isa", r.isa},
      {"f32_peak_loop", r.f32_peak_loop},
      {"f32_peak_gflops", r.f32_peak_gflops},
      {"fraction_of_peak", r.fraction_of_peak},
      {"peak_rss_bytes", peak},
      {"weights_bytes", r.weights_bytes},
      {"weights_dtype", r.weights_dtype},
      {"peak_after_load_bytes", r.peak_memory_bytes},
      {"cache_bytes", r.cache_bytes},
      {"peak_over_weights_plus_caches", peak / (r.weights_bytes + r.cache_bytes)},
      {"blas", r.blas.library + " " + r.blas.kernel},
      {"blas_threads", r.blas.threads},
      {"seconds_by_part", breakdown},
      {"by_threads", by_threads}};
}

void add_bench_forward(CLI::App& bench) {
  auto* sub =
      bench.add_subcommand("forward", "Prefill throughput against this machine's sgemm rate");
  auto a = std::make_shared<ForwardArgs>();
  auto* model_opt = sub->add_option("--model", a->model, "Hugging Face model folder");
  auto* config_opt = sub->add_option(
      "--config", a->options.config_file,
      "instead of --model: a config.json file, random weights (a large model's shape)");
  model_opt->excludes(config_opt);
  sub->add_option("--layers", a->options.layers,
                  "with --config: keep the first N layers (the result is also scaled to all)")
      ->needs(config_opt);
  sub->add_option("--tokens", a->options.tokens, "prompt length")->capture_default_str();
  sub->add_option("--reps", a->options.reps, "timed prefills (median reported)")
      ->capture_default_str();
  sub->add_option("--seed", a->options.seed, "seed of the random prompt")->capture_default_str();
  sub->add_option("--threads", a->options.threads,
                  "thread counts to measure in turn, e.g. 1,2 (a table per part); default: the "
                  "current count")
      ->delimiter(',');
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  add_device_option(sub, a->device);
  on_run(sub, [a] {
    HYPIC_REQUIRE(!a->model.empty() || !a->options.config_file.empty(),
                  "bench forward: give --model FOLDER or --config FILE");
    const DeviceChoice device = choose_device(a->device);
    print_device(device);
    a->options.backend = device.backend;
    const bench::ForwardResult r = bench::run_forward(a->model, a->options);
    const double peak = double(peak_rss_bytes());
    print_forward(*a, r, peak);
    write_json(a->json, forward_json(*a, r, peak));
    return 0;
  });
}

void add_bench_blas(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "blas",
      "sgemm GFLOP/s of the BLAS kernel in use, per thread count (shows the kernel choice)");
  struct Args {
    bench::BlasOptions options;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--n", a->options.n, "matrix size (n x n x n)")->capture_default_str();
  sub->add_option("--reps", a->options.reps, "timed products (median)")->capture_default_str();
  sub->add_flag_callback(
      "--no-bf16", [a] { a->options.bf16_shapes.clear(); },
      "skip the bf16-weight section (f32 vs convert vs AVX-512 BF16 paths per shape)");
  sub->add_flag_callback(
      "--no-few-rows", [a] { a->options.few_row_shapes.clear(); },
      "skip the few-row section (linear's column tiles vs one single-threaded BLAS call)");
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] {
    const bench::BlasResult r = bench::run_blas(a->options);
    std::printf("BLAS: %s, kernel %s%s%s\n", r.blas.library.c_str(), r.blas.kernel.c_str(),
                r.blas.note.empty() ? "" : "; ", r.blas.note.c_str());
    std::printf("CPU: %s; instruction sets usable here: %s\n", kernels::cpu_model().c_str(),
                kernels::cpu_isa_summary().c_str());
    nlohmann::json rates = nlohmann::json::object(), one_call = nlohmann::json::object(),
                   peaks = nlohmann::json::object();
    std::string peak_loop;
    for (const bench::BlasRate& rate : r.rates) {
      const bench::F32Peak peak = bench::measure_f32_peak(rate.threads);
      peak_loop = peak.loop;
      std::printf(
          "sgemm %d^3, %d thread(s): %.1f GFLOP/s in hypic's tiles, %.1f GFLOP/s as one "
          "BLAS call on its own threads (median of %d)",
          a->options.n, rate.threads, rate.gflops, rate.one_call_gflops, a->options.reps);
      if (peak.gflops > 0)
        std::printf("; f32 FMA peak %.1f GFLOP/s (%s): tiles %.0f %% of it", peak.gflops,
                    peak.loop.c_str(), 100.0 * rate.gflops / peak.gflops);
      std::printf("\n");
      rates[std::to_string(rate.threads)] = rate.gflops;
      one_call[std::to_string(rate.threads)] = rate.one_call_gflops;
      peaks[std::to_string(rate.threads)] = peak.gflops;
    }
    nlohmann::json bf16 = nlohmann::json::array();
    if (!r.bf16.empty())
      std::printf(
          "bf16 weights, y[m,n] = x[m,k] W[n,k]^T at %d thread(s), GFLOP/s (AVX-512 BF16: %s):\n"
          "  %5s %6s %6s  %7s %7s %7s %7s %7s  %-7s %-7s %8s %8s %8s\n",
          r.blas.threads, kernels::bf16_dot_available() ? "yes" : "no", "m", "n", "k", "f32",
          "convert", "dot3", "dot2", "dot1", "auto", "fastest", "err3", "err2", "err1");
    for (const bench::Bf16Rate& b : r.bf16) {
      std::printf("  %5d %6d %6d  %7.1f %7.1f %7.1f %7.1f %7.1f  %-7s %-7s %8.1e %8.1e %8.1e\n",
                  b.m, b.n, b.k, b.f32_gflops, b.convert_gflops, b.dot3_gflops, b.dot2_gflops,
                  b.dot1_gflops, b.auto_path.c_str(), b.fastest.c_str(), b.dot3_max_rel_err,
                  b.dot2_max_rel_err, b.dot1_max_rel_err);
      bf16.push_back({{"m", b.m},
                      {"n", b.n},
                      {"k", b.k},
                      {"f32_gflops", b.f32_gflops},
                      {"convert_gflops", b.convert_gflops},
                      {"dot3_gflops", b.dot3_gflops},
                      {"dot2_gflops", b.dot2_gflops},
                      {"dot1_gflops", b.dot1_gflops},
                      {"auto", b.auto_path},
                      {"fastest", b.fastest},
                      {"dot3_max_rel_err", b.dot3_max_rel_err},
                      {"dot2_max_rel_err", b.dot2_max_rel_err},
                      {"dot1_max_rel_err", b.dot1_max_rel_err}});
    }
    nlohmann::json few_rows = nlohmann::json::array();
    if (!r.few_rows.empty())
      std::printf(
          "few-row products y[m,n] = x[m,k] W[n,k]^T at %d thread(s), microseconds (median;"
          " one call: one BLAS call on one thread, as before linear's column tiles):\n"
          "  %5s %6s %6s  %5s %10s %10s %8s\n",
          r.blas.threads, "m", "n", "k", "tiles", "linear", "one call", "speed-up");
    for (const bench::FewRowRate& f : r.few_rows) {
      const double speedup = f.tiled_us > 0 ? f.one_call_us / f.tiled_us : 0.0;
      std::printf("  %5d %6d %6d  %5d %10.1f %10.1f %7.2fx\n", f.m, f.n, f.k, f.tiles, f.tiled_us,
                  f.one_call_us, speedup);
      few_rows.push_back({{"m", f.m},
                          {"n", f.n},
                          {"k", f.k},
                          {"tiles", f.tiles},
                          {"linear_us", f.tiled_us},
                          {"one_call_us", f.one_call_us},
                          {"speedup", speedup}});
    }
    write_json(a->json, {{"bench", "blas"},
                         {"library", r.blas.library},
                         {"kernel", r.blas.kernel},
                         {"note", r.blas.note},
                         {"n", a->options.n},
                         {"cpu_model", kernels::cpu_model()},
                         {"isa", kernels::cpu_isa_summary()},
                         {"f32_peak_loop", peak_loop},
                         {"f32_peak_gflops_by_threads", peaks},
                         {"gflops_by_threads", rates},
                         {"one_blas_call_gflops_by_threads", one_call},
                         {"bf16_dot_available", kernels::bf16_dot_available()},
                         {"bf16", bf16},
                         {"few_rows", few_rows}});
    return 0;
  });
}
}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (medians and ratios from one run)");
  bench->require_subcommand(1);
  add_bench_blas(*bench);
  add_bench_forward(*bench);
  add_bench_ttft(*bench);
  add_bench_qps(*bench);
  add_bench_compose(*bench);
  add_bench_tokenize(*bench);
  add_bench_scaling(*bench);
  add_bench_kernels(*bench);
  add_bench_roofline(*bench);
  add_bench_peak(*bench);
  add_bench_store(*bench);
}

}  // namespace hypic::app
