// `hypic bench ttft`: time to first token of every caching mode on one RAG-like trace
// (bench/ttft.hpp measures; this command parses, calls and reports). Prints TTFT p50/p99 per
// mode, the ratios prefix/pic and full/pic, and pic's TTFT by phase.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "app/pic_report.hpp"
#include "bench/ttft.hpp"
#include "eval/metrics.hpp"
#include "model/presets.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;

struct TtftArgs {
  std::string arch = "qwen3_5", preset = "small", json, modes = "full,prefix,pic,pic-addition";
  std::string junction = "8", segments = "16", device;
  bool corpus_given = false;
  bench::TtftOptions options;  // the other flags, as given
};

// The batch summary of one mode's run, as `serve` reports a batch.
RunSummary summarize(const bench::TtftModeRun& run, const pic::JunctionSpec& junction,
                     const std::string& device) {
  RunSummary summary(run.mode, junction, run.memory_budget_bytes);
  summary.device = device;
  for (const pic::QueryResult& r : run.results) summary.add(r, std::nullopt);
  summary.memory_bytes = run.memory_bytes;
  return summary;
}

void print_mode(const bench::TtftModeRun& run, const RunSummary& summary) {
  std::printf("  %-22s ttft p50 %9.1f ms  p99 %9.1f ms   (%s)\n", run.name.c_str(),
              eval::percentile(run.ttft_ms, 50), eval::percentile(run.ttft_ms, 99),
              summary.one_line().c_str());
  std::fflush(stdout);
  if (!pic::uses_entries(run.mode)) return;
  const model::ForwardTimes& ft = run.forward;
  std::printf(
      "    forward time inside (s, all queries): gdn proj %.2f conv %.2f rule %.2f out %.2f, "
      "attn proj %.2f core %.2f out %.2f, mlp %.2f, norms %.2f, lm_head %.2f; splices %.2f\n",
      ft.gdn_proj, ft.gdn_conv, ft.gdn_rule, ft.gdn_out, ft.attn_proj, ft.attn_core, ft.attn_out,
      ft.mlp, ft.embed_norms, ft.lm_head, ft.splice);
}

// Prints each step as the benchmark reaches it; keeps each mode's summary for the JSON.
bench::TtftProgress reporter(const TtftArgs& a, std::map<std::string, RunSummary>& summaries) {
  const bench::TtftOptions& o = a.options;
  bench::TtftProgress p;
  p.model_ready = [&a, &o](const bench::TtftResult& r) {
    const model::ModelConfig& cfg = o.model;
    std::printf(
        "model: %s preset %s, %d layers (%s), hidden %d, %.1f M parameters; "
        "built and fingerprinted in %.1f s\n",
        model::arch_name(cfg.arch), a.preset.c_str(), cfg.num_hidden_layers,
        cfg.layout_string().c_str(), cfg.hidden_size, r.parameter_count / 1e6, r.build_seconds);
  };
  // Progress goes to stderr, one line per query of the trace, with the time since the trace
  // began (stdout keeps the results).
  auto trace_start = std::make_shared<std::chrono::steady_clock::time_point>();
  p.query_done = [trace_start](int answered, int of) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *trace_start).count();
    std::fprintf(stderr, "bench ttft: query %d of %d answered by every mode (%.1f s)\n", answered,
                 of, seconds);
  };
  p.trace_ready = [&o, trace_start](const bench::TtftResult& r) {
    *trace_start = std::chrono::steady_clock::now();
    std::printf(
        "trace: %d queries x %d segments x %d tokens + %d question tokens (%lld-token "
        "prompts), corpus %d documents, Zipf s=%.2f\n",
        o.queries, r.segments, o.segment_tokens, o.question_tokens,
        static_cast<long long>(r.prompt_tokens), o.corpus, o.zipf);
  };
  p.store_warmed = [&o](const bench::TtftResult& r) {
    std::printf("warm-up: %zu entries in %.1f s (%.0f tokens/s), store %.1f MiB (%s)\n",
                r.warmup_entries, r.warmup_seconds,
                double(r.warmup_entries) * o.segment_tokens / r.warmup_seconds,
                r.store_bytes / 1048576.0, o.dtype.c_str());
  };
  p.mode_done = [&o, &summaries](const bench::TtftModeRun& run) {
    const std::string device =
        o.backend != nullptr && o.backend->device() != Device::Host ? "cuda" : "cpu";
    if (summaries.empty()) std::printf("TTFT per mode (%d queries each, same trace):\n", o.queries);
    const RunSummary& s =
        summaries.insert_or_assign(run.name, summarize(run, o.junction, device)).first->second;
    print_mode(run, s);
  };
  return p;
}

void print_ratios(const bench::TtftResult& r, const std::map<std::string, RunSummary>& summaries) {
  if (r.ratio_prefix_over_pic_p50)
    std::printf("ratio prefix/pic at p50: %.2fx\n", *r.ratio_prefix_over_pic_p50);
  if (r.ratio_full_over_pic_p50)
    std::printf("ratio full/pic at p50:   %.2fx\n", *r.ratio_full_over_pic_p50);
  for (const bench::TtftModeRun& run : r.modes) {
    if (run.name != "pic" && run.name != "pic (store reads only)") continue;
    const json ph = summaries.at(run.name).metrics_json()["phase_ms_mean"];
    std::printf(
        "%s TTFT breakdown (mean ms): store reads %.1f, composition %.1f, junction "
        "windows + question (one pass) %.1f, separate question prefill %.1f, cold fill %.1f\n",
        run.name.c_str(), ph["store_read"].get<double>(), ph["composition"].get<double>(),
        ph["junction"].get<double>(), ph["question"].get<double>(), ph["cold_fill"].get<double>());
  }
}

// One segment count's figures: its modes' metrics and the p50 ratios.
json point_json(const bench::TtftResult& r, const std::map<std::string, RunSummary>& summaries) {
  json j = {{"segments", r.segments}, {"prompt_tokens", r.prompt_tokens}};
  json per_mode = json::object();
  for (const auto& [name, summary] : summaries) per_mode[name] = summary.metrics_json();
  j["modes"] = per_mode;
  if (r.ratio_prefix_over_pic_p50) j["ratio_prefix_over_pic_p50"] = *r.ratio_prefix_over_pic_p50;
  if (r.ratio_full_over_pic_p50) j["ratio_full_over_pic_p50"] = *r.ratio_full_over_pic_p50;
  return j;
}

// The run's settings, then the first (or only) count's figures at the top level as before,
// and every count's under "points".
json ttft_json(const TtftArgs& a, const std::vector<bench::TtftResult>& results,
               const std::vector<json>& points) {
  const bench::TtftOptions& o = a.options;
  const bench::TtftResult& r = results.front();
  json j = {{"bench", "ttft"},
            {"device", choose_device(a.device).name},
            {"arch", a.arch},
            {"preset", a.preset},
            {"segments", r.segments},
            {"segment_tokens", o.segment_tokens},
            {"question_tokens", o.question_tokens},
            {"queries", o.queries},
            {"corpus", o.corpus},
            {"zipf", o.zipf},
            {"junction", o.junction.to_string()},
            {"dtype", o.dtype},
            {"memory_budget_mib", o.memory_budget_mib},
            {"max_position_embeddings", o.model.max_position_embeddings},
            {"seed", o.seed},
            {"warmup_seconds", r.warmup_seconds},
            {"store_bytes", r.store_bytes}};
  for (const char* key :
       {"prompt_tokens", "modes", "ratio_prefix_over_pic_p50", "ratio_full_over_pic_p50"})
    if (points.front().contains(key)) j[key] = points.front()[key];
  j["points"] = points;
  return j;
}

// Context length against the p50 ratios, one row per segment count.
void print_sweep_table(const std::vector<bench::TtftResult>& results) {
  std::printf("\n%9s %14s %12s %12s %12s %10s %10s\n", "segments", "prompt tokens", "full p50 ms",
              "prefix p50", "pic p50 ms", "prefix/pic", "full/pic");
  auto p50 = [](const bench::TtftResult& r, const char* name) {
    for (const bench::TtftModeRun& run : r.modes)
      if (run.name == name) return run.ttft_p50_ms;
    return 0.0;
  };
  for (const bench::TtftResult& r : results)
    std::printf("%9d %14lld %12.1f %12.1f %12.1f %9.2fx %9.2fx\n", r.segments,
                static_cast<long long>(r.prompt_tokens), p50(r, "full"), p50(r, "prefix"),
                p50(r, "pic"), r.ratio_prefix_over_pic_p50.value_or(0.0),
                r.ratio_full_over_pic_p50.value_or(0.0));
}

int run_bench_ttft(TtftArgs& a) {
  const DeviceChoice device = choose_device(a.device);
  print_device(device);
  a.options.backend = device.backend;
  bench::TtftOptions& o = a.options;
  o.junction = pic::JunctionSpec::parse(a.junction);
  o.modes = split_list(a.modes);
  for (const std::string& m : o.modes) pic::parse_mode(m);
  const std::vector<int> counts = parse_count_list(a.segments, "--segments", 1 << 20);
  const int most = *std::max_element(counts.begin(), counts.end());
  o.segments = counts.front();
  if (!a.corpus_given) o.corpus = std::max(o.corpus, most);
  o.model = model::preset_config(model::parse_arch(a.arch), a.preset);
  // A random model has no trained context length: a sweep past the preset's limit raises it
  // (RoPE is defined at every position), and says so.
  const int64_t longest = int64_t(most) * o.segment_tokens + o.question_tokens;
  if (counts.size() > 1 && longest > o.model.max_position_embeddings) {
    std::printf("context: the preset's %d positions raised to %lld for the longest prompt\n",
                o.model.max_position_embeddings, static_cast<long long>(longest));
    o.model.max_position_embeddings = static_cast<int>(longest);
  }
  std::map<std::string, RunSummary> summaries;  // the current count's modes
  std::vector<json> points;
  bench::TtftProgress progress = reporter(a, summaries);
  const auto announce = progress.trace_ready;
  progress.trace_ready = [&](const bench::TtftResult& r) {
    summaries.clear();
    announce(r);
  };
  progress.trace_done = [&](const bench::TtftResult& r) {
    print_ratios(r, summaries);
    points.push_back(point_json(r, summaries));
  };
  const std::vector<bench::TtftResult> results = bench::run_ttft_sweep(o, counts, progress);
  if (results.size() > 1) print_sweep_table(results);
  if (!a.json.empty()) {
    write_text_file(a.json, ttft_json(a, results, points).dump(2) + "\n");
    std::printf("figures written to %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace

void add_bench_ttft(CLI::App& bench) {
  auto* sub =
      bench.add_subcommand("ttft", "Time to first token of every caching mode on a RAG-like trace");
  auto a = std::make_shared<TtftArgs>();
  bench::TtftOptions& o = a->options;
  sub->add_option("--arch", a->arch, "qwen3_5 | qwen3_next")->capture_default_str();
  sub->add_option("--preset", a->preset, "random model size: tiny, small, bench")
      ->capture_default_str();
  sub->add_option("--segments", a->segments,
                  "segments per query; several (16,64,128) sweep the context length on one "
                  "model and store")
      ->capture_default_str();
  sub->add_option("--segment-tokens", o.segment_tokens, "tokens per segment")
      ->capture_default_str();
  sub->add_option_function<int>(
         "--corpus",
         [a](int n) {
           a->options.corpus = n;
           a->corpus_given = true;
         },
         "documents in the corpus (default 48, or the largest segment count)")
      ->capture_default_str();
  sub->add_option("--queries", o.queries, "timed queries per mode")->capture_default_str();
  sub->add_option("--question-tokens", o.question_tokens, "question suffix length")
      ->capture_default_str();
  sub->add_option("--zipf", o.zipf, "Zipf exponent of document popularity")->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window")->capture_default_str();
  sub->add_option("--dtype", o.dtype, "store element type")->capture_default_str();
  sub->add_option("--memory-budget", o.memory_budget_mib, "MiB for the memory tier / snapshots")
      ->capture_default_str();
  sub->add_option("--modes", a->modes, "comma-separated modes")->capture_default_str();
  sub->add_option("--store", o.store, "keep the warmed store at this path (default: temporary)");
  sub->add_option("--seed", o.seed, "seed of weights and trace")->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  add_device_option(sub, a->device);
  on_run(sub, [a] { return run_bench_ttft(*a); });
}

}  // namespace hypic::app
