// `hypic bench …`: benchmarks that print medians and ratios measured in one run, and write
// their figures to --json FILE.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "common/error.hpp"
#include "hypic/kernels/blas.hpp"
#include "model/checkpoint.hpp"
#include "model/flops.hpp"
#include "model/forward.hpp"

namespace hypic::app {
namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Single-process sgemm rate of this machine with the BLAS and thread count in use:
// median of `reps` square n×n products after one warm-up.
double measure_sgemm_gflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    kernels::gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    times.push_back(seconds_since(t0));
  }
  return 2.0 * n * double(n) * n / median(times) / 1e9;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  write_text_file(path, j.dump(2) + "\n");
  std::printf("figures written to %s\n", path.c_str());
}

void add_bench_forward(CLI::App& bench) {
  auto* sub =
      bench.add_subcommand("forward", "Prefill throughput against this machine's sgemm rate");
  struct Args {
    std::string model, json;
    int tokens = 4096, reps = 3, seed = 0;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "Hugging Face model folder")->required();
  sub->add_option("--tokens", args->tokens, "prompt length")->capture_default_str();
  sub->add_option("--reps", args->reps, "timed prefills (median reported)")->capture_default_str();
  sub->add_option("--seed", args->seed, "seed of the random prompt")->capture_default_str();
  sub->add_option("--json", args->json, "write the figures to this JSON file");
  on_run(sub, [args] {
    require(args->tokens > 0 && args->reps > 0, "--tokens and --reps must be positive");
    const auto blas = kernels::blas_info();
    std::printf("BLAS: %s, kernel %s, %d thread(s)%s%s\n", blas.library.c_str(),
                blas.kernel.c_str(), blas.threads, blas.note.empty() ? "" : "; ",
                blas.note.c_str());
    const double sgemm = measure_sgemm_gflops(2048, 5);
    std::printf("sgemm 2048^3 (same process, same threads): %.1f GFLOP/s\n", sgemm);

    auto loaded = model::load_checkpoint(args->model);
    const model::ModelConfig cfg = loaded.config;
    model::Model net(std::move(loaded.config), std::move(loaded.weights));
    const double weight_bytes = double(net.weights().bytes());
    std::mt19937 rng(static_cast<uint32_t>(args->seed));
    std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
    std::vector<int32_t> ids(static_cast<size_t>(args->tokens));
    for (auto& t : ids) t = tok(rng);

    std::vector<double> times;
    model::ForwardTimes parts;
    double cache_bytes = 0;
    for (int r = 0; r <= args->reps; ++r) {  // r == 0 warms up
      auto cache = net.new_cache();
      net.times().clear();
      const auto t0 = Clock::now();
      net.prefill(ids, cache, model::LogitsMode::Last);
      const double dt = seconds_since(t0);
      if (r > 0) times.push_back(dt);
      if (r == 1) parts = net.times();
      cache_bytes = double(cache.bytes());
    }
    const double t = median(times);
    const auto flops = model::prefill_flops(cfg, args->tokens, 0, 1);
    const double gflops = flops.total() / t / 1e9;
    const double peak = double(peak_rss_bytes());
    std::printf("model: %s, %d layers, %.1f M parameters (f32 %.0f MiB)\n",
                model::arch_name(cfg.arch), cfg.num_hidden_layers,
                net.weights().parameter_count() / 1e6, weight_bytes / 1048576);
    std::printf("prefill %d tokens: median %.3f s over %d runs -> %.0f tokens/s\n", args->tokens, t,
                args->reps, args->tokens / t);
    std::printf(
        "achieved %.1f GFLOP/s = %.0f %% of sgemm (%.2f TFLOP counted: proj %.2f, "
        "attention %.2f, delta rule %.2f)\n",
        gflops, 100.0 * gflops / sgemm, flops.total() / 1e12, flops.projections / 1e12,
        flops.attention / 1e12, flops.delta_rule / 1e12);
    std::printf("peak memory %.0f MiB = %.2f x (weights + caches %.0f MiB)\n", peak / 1048576,
                peak / (weight_bytes + cache_bytes), (weight_bytes + cache_bytes) / 1048576);
    const double total = parts.total();
    std::printf("time by part (first timed run, %% of %.3f s):", total);
    const std::pair<const char*, double> named[] = {
        {"gdn_proj", parts.gdn_proj},       {"gdn_conv", parts.gdn_conv},
        {"gdn_rule", parts.gdn_rule},       {"gdn_out", parts.gdn_out},
        {"attn_proj", parts.attn_proj},     {"attn_core", parts.attn_core},
        {"attn_out", parts.attn_out},       {"mlp", parts.mlp},
        {"moe_experts", parts.moe_experts}, {"moe_shared", parts.moe_shared},
        {"norms", parts.embed_norms},       {"lm_head", parts.lm_head}};
    nlohmann::json breakdown;
    for (const auto& [name, sec] : named) {
      if (sec > 0) std::printf(" %s %.1f", name, 100.0 * sec / std::max(total, 1e-12));
      breakdown[name] = sec;
    }
    std::printf("\n");
    write_json(args->json, {{"bench", "forward"},
                            {"model", args->model},
                            {"tokens", args->tokens},
                            {"runs", args->reps},
                            {"prefill_seconds_median", t},
                            {"tokens_per_second", args->tokens / t},
                            {"flops_counted", flops.total()},
                            {"achieved_gflops", gflops},
                            {"sgemm_gflops", sgemm},
                            {"fraction_of_sgemm", gflops / sgemm},
                            {"peak_rss_bytes", peak},
                            {"weights_bytes", weight_bytes},
                            {"cache_bytes", cache_bytes},
                            {"peak_over_weights_plus_caches", peak / (weight_bytes + cache_bytes)},
                            {"blas", blas.library + " " + blas.kernel},
                            {"blas_threads", blas.threads},
                            {"seconds_by_part", breakdown}});
    return 0;
  });
}

void add_bench_blas(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "blas",
      "sgemm GFLOP/s of the BLAS kernel in use, per thread count (shows the kernel choice)");
  struct Args {
    int n = 2048, reps = 5;
    std::string json;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--n", args->n, "matrix size (n x n x n)")->capture_default_str();
  sub->add_option("--reps", args->reps, "timed products (median)")->capture_default_str();
  sub->add_option("--json", args->json, "write the figures to this JSON file");
  on_run(sub, [args] {
    require(args->n > 0 && args->reps > 0, "--n and --reps must be positive");
    const auto blas = kernels::blas_info();
    std::printf("BLAS: %s, kernel %s%s%s\n", blas.library.c_str(), blas.kernel.c_str(),
                blas.note.empty() ? "" : "; ", blas.note.c_str());
    nlohmann::json rates = nlohmann::json::object();
    const int max_threads = std::max(1, blas.threads);
    for (int t = 1; t <= max_threads; ++t) {
      kernels::set_blas_threads(t);
      const double g = measure_sgemm_gflops(args->n, args->reps);
      std::printf("sgemm %d^3, %d thread(s): %.1f GFLOP/s (median of %d)\n", args->n, t, g,
                  args->reps);
      rates[std::to_string(t)] = g;
    }
    kernels::set_blas_threads(max_threads);
    write_json(args->json, {{"bench", "blas"},
                            {"library", blas.library},
                            {"kernel", blas.kernel},
                            {"note", blas.note},
                            {"n", args->n},
                            {"gflops_by_threads", rates}});
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
  add_bench_compose(*bench);
  add_bench_tokenize(*bench);
  add_bench_scaling(*bench);
}

}  // namespace hypic::app
