// `hypic bench qps`: sustainable QPS under a p99 TTFT SLA per caching mode, from an open-loop
// Poisson load over a RAG-like trace (bench/qps.hpp measures; this command parses, calls and
// reports). Prints each load point, a table per mode and the pic/prefix ratio; --json keeps
// every figure with the trace and seed (scripts/plot_qps.py draws TTFT against load).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "bench/qps.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;

struct QpsArgs {
  std::string arch = "qwen3_5", preset = "tiny", json, modes = "full,prefix,pic";
  std::string junction = "8", loads = "0.5,0.8,1.0,1.3", order = "popularity";
  bench::QpsOptions options;
};

std::vector<double> parse_loads(const std::string& text) {
  std::vector<double> out;
  for (const std::string& part : split_list(text)) {
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    HYPIC_REQUIRE(end != nullptr && *end == '\0' && v > 0 && v < 1e6,
                  "--loads '" + text + "': expected positive numbers separated by commas");
    out.push_back(v);
  }
  HYPIC_REQUIRE(!out.empty(), "--loads '" + text + "': expected at least one value");
  std::sort(out.begin(), out.end());
  return out;
}

const bench::QpsModeResult* find_mode(const bench::QpsResult& r, const std::string& name) {
  for (const auto& m : r.modes)
    if (m.mode == name) return &m;
  return nullptr;
}

json qps_json(const QpsArgs& a, const bench::QpsResult& r) {
  const bench::QpsOptions& o = a.options;
  json trace = json::array();
  for (const bench::QpsTraceQuery& q : r.trace)
    trace.push_back({{"documents", q.documents}, {"gap", q.gap}});
  json modes = json::array();
  for (const bench::QpsModeResult& m : r.modes) {
    json points = json::array();
    for (const bench::QpsPoint& p : m.points)
      points.push_back({{"rate_qps", p.rate},
                        {"ttft_p50_ms", p.ttft_p50_ms},
                        {"ttft_p99_ms", p.ttft_p99_ms},
                        {"service_mean_ms", p.service_mean_ms},
                        {"utilization", p.utilization},
                        {"offered_load", p.offered_load},
                        {"within_sla", p.within_sla}});
    modes.push_back({{"mode", m.mode},
                     {"unloaded_ttft_p50_ms", m.unloaded_ttft_p50_ms},
                     {"unloaded_ttft_p99_ms", m.unloaded_ttft_p99_ms},
                     {"unloaded_service_ms", m.unloaded_service_ms},
                     {"capacity_qps", m.capacity_qps},
                     {"sustainable_qps", m.sustainable_qps},
                     {"points", points}});
  }
  json j = {{"bench", "qps"},
            {"arch", a.arch},
            {"preset", a.preset},
            {"seed", o.seed},
            {"junction", o.junction.to_string()},
            {"dtype", o.dtype},
            {"corpus", o.corpus},
            {"segment_tokens", o.segment_tokens},
            {"segments_min", o.min_segments},
            {"segments_max", o.max_segments},
            {"question_tokens", o.question_tokens},
            {"queries", o.queries},
            {"zipf", o.zipf},
            {"cold_share", o.cold_share},
            {"order", a.order},
            {"loads", o.loads},
            {"refine_steps", o.refine_steps},
            {"memory_budget_mib", o.memory_budget_mib},
            {"sla_ms", r.sla_ms},
            {"sla_ms_given", o.sla_ms > 0},
            {"prompt_tokens_mean", r.prompt_tokens_mean},
            {"cold_segments_share", r.cold_segments_share},
            {"warmup_seconds", r.warmup_seconds},
            {"modes", modes},
            {"trace", trace}};
  const auto* pic = find_mode(r, "pic");
  const auto* prefix = find_mode(r, "prefix");
  const auto* full = find_mode(r, "full");
  if (pic && prefix && prefix->sustainable_qps > 0)
    j["ratio_pic_over_prefix_sustainable"] = pic->sustainable_qps / prefix->sustainable_qps;
  if (pic && full && full->sustainable_qps > 0)
    j["ratio_pic_over_full_sustainable"] = pic->sustainable_qps / full->sustainable_qps;
  return j;
}

int run_bench_qps(QpsArgs& a) {
  bench::QpsOptions& o = a.options;
  o.junction = pic::JunctionSpec::parse(a.junction);
  o.modes = split_list(a.modes);
  for (const std::string& m : o.modes) pic::parse_mode(m);
  o.loads = parse_loads(a.loads);
  HYPIC_REQUIRE(a.order == "popularity" || a.order == "random",
                "--order must be popularity or random");
  o.popularity_order = a.order == "popularity";
  o.model = model::preset_config(model::parse_arch(a.arch), a.preset);
  // A random model has no trained context length: raise the preset's when the longest query
  // needs more (RoPE is defined at every position), and say so.
  const int64_t longest = int64_t(o.max_segments) * o.segment_tokens + o.question_tokens;
  if (longest > o.model.max_position_embeddings) {
    std::printf("context: the preset's %d positions raised to %lld for the longest query\n",
                o.model.max_position_embeddings, static_cast<long long>(longest));
    o.model.max_position_embeddings = static_cast<int>(longest);
  }
  std::printf("model: %s preset %s, %d layers (%s), hidden %d\n", model::arch_name(o.model.arch),
              a.preset.c_str(), o.model.num_hidden_layers, o.model.layout_string().c_str(),
              o.model.hidden_size);
  bench::QpsProgress progress;
  progress.store_warmed = [&](const bench::QpsResult& r) {
    std::printf(
        "trace: %d queries of %d-%d segments x %d tokens (%s order) + %d question tokens, mean "
        "prompt %lld tokens, corpus %d, Zipf s=%.2f, %.1f %% cold segments, seed %llu\n",
        o.queries, o.min_segments, o.max_segments, o.segment_tokens, a.order.c_str(),
        o.question_tokens, static_cast<long long>(r.prompt_tokens_mean), o.corpus, o.zipf,
        100.0 * r.cold_segments_share, static_cast<unsigned long long>(o.seed));
    std::printf("warm-up: %zu entries in %.1f s\n", r.warmup_entries, r.warmup_seconds);
    std::fflush(stdout);
  };
  progress.calibrated = [](const bench::QpsModeResult& m) {
    std::printf(
        "  %-12s unloaded: ttft p50 %8.1f ms p99 %8.1f ms, service %8.1f ms -> capacity "
        "%.2f qps\n",
        m.mode.c_str(), m.unloaded_ttft_p50_ms, m.unloaded_ttft_p99_ms, m.unloaded_service_ms,
        m.capacity_qps);
    std::fflush(stdout);
  };
  progress.sla_set = [&](const bench::QpsResult& r) {
    std::printf("SLA: p99 TTFT <= %.1f ms%s\n", r.sla_ms,
                o.sla_ms > 0 ? "" : " (twice the slowest mode's unloaded p99)");
  };
  progress.point_done = [](const bench::QpsModeResult& m, const bench::QpsPoint& p) {
    std::printf(
        "  %-12s %8.2f qps: ttft p50 %9.1f ms p99 %9.1f ms, utilization %3.0f %%, offered load "
        "%.2f%s\n",
        m.mode.c_str(), p.rate, p.ttft_p50_ms, p.ttft_p99_ms, 100.0 * p.utilization, p.offered_load,
        p.within_sla          ? ""
        : p.offered_load >= 1 ? "  (overloaded)"
                              : "  (over the SLA)");
    std::fflush(stdout);
  };
  const bench::QpsResult r = bench::run_qps(o, progress);
  std::printf("\nSLA p99 TTFT <= %.1f ms\n", r.sla_ms);
  std::printf("%-12s %14s %14s %16s\n", "mode", "capacity qps", "sustainable", "unloaded p50 ms");
  for (const bench::QpsModeResult& m : r.modes)
    std::printf("%-12s %14.2f %14.2f %16.1f\n", m.mode.c_str(), m.capacity_qps, m.sustainable_qps,
                m.unloaded_ttft_p50_ms);
  const json j = qps_json(a, r);
  if (j.contains("ratio_pic_over_prefix_sustainable"))
    std::printf("sustainable QPS pic/prefix: %.2fx\n",
                j["ratio_pic_over_prefix_sustainable"].get<double>());
  if (j.contains("ratio_pic_over_full_sustainable"))
    std::printf("sustainable QPS pic/full:   %.2fx\n",
                j["ratio_pic_over_full_sustainable"].get<double>());
  if (!a.json.empty()) {
    write_text_file(a.json, j.dump(2) + "\n");
    std::printf("figures written to %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace

void add_bench_qps(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "qps", "Sustainable queries per second under a p99 TTFT SLA, per caching mode");
  auto a = std::make_shared<QpsArgs>();
  bench::QpsOptions& o = a->options;
  sub->add_option("--arch", a->arch, "qwen3_5 | qwen3_next")->capture_default_str();
  sub->add_option("--preset", a->preset, "random model size: tiny, small, bench")
      ->capture_default_str();
  sub->add_option("--modes", a->modes, "comma-separated modes")->capture_default_str();
  sub->add_option("--corpus", o.corpus, "documents in the corpus")->capture_default_str();
  sub->add_option("--segment-tokens", o.segment_tokens, "tokens per segment")
      ->capture_default_str();
  sub->add_option("--segments-min", o.min_segments, "fewest segments per query")
      ->capture_default_str();
  sub->add_option("--segments-max", o.max_segments, "most segments per query")
      ->capture_default_str();
  sub->add_option("--question-tokens", o.question_tokens, "question suffix length")
      ->capture_default_str();
  sub->add_option("--queries", o.queries, "queries per load point")->capture_default_str();
  sub->add_option("--zipf", o.zipf, "Zipf exponent of document popularity")->capture_default_str();
  sub->add_option("--cold-share", o.cold_share,
                  "probability that a segment is a fresh document (corpus update)")
      ->capture_default_str();
  sub->add_option("--order", a->order, "segment order in a query: popularity or random")
      ->capture_default_str();
  sub->add_option("--sla-ms", o.sla_ms,
                  "p99 TTFT bound in ms (0: twice the slowest mode's unloaded p99)")
      ->capture_default_str();
  sub->add_option("--loads", a->loads, "offered loads as multiples of each mode's capacity")
      ->capture_default_str();
  sub->add_option("--refine", o.refine_steps, "bisection steps at the SLA's edge")
      ->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window")->capture_default_str();
  sub->add_option("--dtype", o.dtype, "store element type")->capture_default_str();
  sub->add_option("--memory-budget", o.memory_budget_mib, "MiB for the memory tier / snapshots")
      ->capture_default_str();
  sub->add_option("--store", o.store, "keep the warmed store at this path (default: temporary)");
  sub->add_option("--seed", o.seed, "seed of weights, corpus, trace and arrivals")
      ->capture_default_str();
  sub->add_option("--json", a->json, "write the figures, trace and seed to this JSON file");
  on_run(sub, [a] { return run_bench_qps(*a); });
}

}  // namespace hypic::app
