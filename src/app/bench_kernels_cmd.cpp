// `hypic bench kernels`: per-op times of a prefill at several thread counts, the speed-ups,
// each op's share of the prefill, and a node-scale projection (src/bench/kernels.*).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "bench/kernels.hpp"
#include "cluster/world.hpp"

namespace hypic::app {
namespace {

struct KernelsArgs {
  bench::KernelsOptions options;
  std::string json;
};

// The ops above 2 % of the prefill that reach `target`× at the last thread count, as "k of n".
std::string target_line(const bench::KernelsResult& r, double target) {
  int big = 0, met = 0;
  std::string below;
  for (const bench::KernelRow& row : r.rows) {
    if (row.share <= 0.02) continue;
    ++big;
    const double s = row.seconds.front() / std::max(1e-12, row.seconds.back());
    if (s >= target)
      ++met;
    else
      below += (below.empty() ? "" : ", ") + row.op;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%d of %d ops above 2 %% of prefill reach %.1fx", met, big,
                target);
  return std::string(buf) + (below.empty() ? "" : " (below: " + below + ")");
}

void print_kernels(const KernelsArgs& a, const bench::KernelsResult& r) {
  const auto& o = a.options;
  std::printf(
      "bench kernels: %s preset %s (%d layers, hidden %d), %d tokens, median of %d "
      "prefills per thread count\n",
      o.arch.c_str(), o.preset.c_str(), r.config.num_hidden_layers, r.config.hidden_size, o.tokens,
      o.reps);
  std::printf("host threads: %s; BLAS %s, kernel %s, one thread per GEMM tile\n",
              r.threading.c_str(), r.blas.library.c_str(), r.blas.kernel.c_str());
  std::printf("%-24s %7s %7s", "op", "calls", "share");
  for (int t : r.threads) std::printf(" %8s", ("t@" + std::to_string(t) + " ms").c_str());
  for (size_t c = 1; c < r.threads.size(); ++c)
    std::printf(" %7s", ("x@" + std::to_string(r.threads[c])).c_str());
  std::printf("\n");
  auto print_row = [&](const bench::KernelRow& row) {
    std::printf("%-24s %7lld %6.1f%%", row.op.c_str(), static_cast<long long>(row.calls),
                100.0 * row.share);
    for (double s : row.seconds) std::printf(" %8.1f", 1e3 * s);
    for (size_t c = 1; c < row.seconds.size(); ++c)
      std::printf(" %6.2fx", row.seconds.front() / std::max(1e-12, row.seconds[c]));
    std::printf("\n");
  };
  for (const bench::KernelRow& row : r.rows) print_row(row);
  print_row(r.other);
  std::printf("%-24s %7s %6.1f%%", "prefill", "", 100.0);
  for (double s : r.prefill_seconds) std::printf(" %8.1f", 1e3 * s);
  for (size_t c = 1; c < r.prefill_seconds.size(); ++c)
    std::printf(" %6.2fx", r.prefill_seconds.front() / std::max(1e-12, r.prefill_seconds[c]));
  std::printf("\n");
  std::printf("%-24s %7s %7s", "cores used (CPU/wall)", "", "");
  for (double u : r.cores_used) std::printf(" %8.2f", u);
  std::printf("\n");
  if (r.threads.size() > 1)
    std::printf("target at %d threads: %s\n", r.threads.back(), target_line(r, 1.7).c_str());
  if (!r.projection.empty()) {
    std::printf("node-scale projection (%s):\n", r.projection_assumption.c_str());
    for (const bench::Projection& p : r.projection)
      std::printf("  %3d cores: prefill %.3f s, %.1fx over 1 thread\n", p.cores, p.prefill_seconds,
                  p.speedup);
  }
}

nlohmann::json row_json(const bench::KernelsResult& r, const bench::KernelRow& row) {
  nlohmann::json secs = nlohmann::json::object(), speedup = nlohmann::json::object();
  for (size_t c = 0; c < r.threads.size(); ++c) {
    secs[std::to_string(r.threads[c])] = row.seconds[c];
    if (c > 0)
      speedup[std::to_string(r.threads[c])] = row.seconds.front() / std::max(1e-12, row.seconds[c]);
  }
  return {{"op", row.op},
          {"calls", row.calls},
          {"share_of_prefill", row.share},
          {"seconds_by_threads", secs},
          {"speedup_by_threads", speedup},
          {"parallel_fraction", row.parallel_fraction}};
}

nlohmann::json kernels_json(const KernelsArgs& a, const bench::KernelsResult& r) {
  nlohmann::json rows = nlohmann::json::array(), proj = nlohmann::json::array();
  for (const bench::KernelRow& row : r.rows) rows.push_back(row_json(r, row));
  nlohmann::json prefill = nlohmann::json::object();
  nlohmann::json cores_used = nlohmann::json::object();
  for (size_t c = 0; c < r.threads.size(); ++c) {
    prefill[std::to_string(r.threads[c])] = r.prefill_seconds[c];
    cores_used[std::to_string(r.threads[c])] = r.cores_used[c];
  }
  for (const bench::Projection& p : r.projection)
    proj.push_back(
        {{"cores", p.cores}, {"prefill_seconds", p.prefill_seconds}, {"speedup", p.speedup}});
  return {{"bench", "kernels"},
          {"arch", a.options.arch},
          {"preset", a.options.preset},
          {"tokens", a.options.tokens},
          {"reps", a.options.reps},
          {"threads", r.threads},
          {"threading", r.threading},
          {"blas", r.blas.library + " " + r.blas.kernel},
          {"prefill_seconds_by_threads", prefill},
          {"cores_used_by_threads", cores_used},
          {"kernels", rows},
          {"other", row_json(r, r.other)},
          {"projection", {{"assumption", r.projection_assumption}, {"cores", proj}}}};
}

}  // namespace

void add_bench_kernels(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "kernels",
      "Per-op prefill times at several thread counts, speed-ups, shares of the "
      "prefill, and a node-scale projection");
  auto a = std::make_shared<KernelsArgs>();
  auto& o = a->options;
  sub->add_option("--arch", o.arch, "architecture of the preset")->capture_default_str();
  sub->add_option("--preset", o.preset, "model preset (random weights)")->capture_default_str();
  sub->add_option("--tokens", o.tokens, "prompt length")->capture_default_str();
  sub->add_option("--reps", o.reps, "timed prefills per thread count (medians)")
      ->capture_default_str();
  sub->add_option("--threads", o.threads, "thread counts, ascending (e.g. 1,2)")
      ->delimiter(',')
      ->check(CLI::Range(1, cluster::kMaxThreads))
      ->capture_default_str();
  sub->add_option("--project", o.project_to, "core counts of the projection")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] {
    const bench::KernelsResult r = bench::run_kernels(a->options);
    print_kernels(*a, r);
    if (!a->json.empty()) {
      write_text_file(a->json, kernels_json(*a, r).dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
