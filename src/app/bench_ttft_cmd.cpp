// `hypic bench ttft`: time to first token of every caching mode on one RAG-like trace.
// A random corpus with Zipf popularity, k segments per query drawn by popularity and put in
// random order, a question suffix; the store is warmed first, then each mode answers the
// same queries. Prints TTFT p50/p99 per mode, the ratios prefix/pic and full/pic, and pic's
// TTFT by phase.
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "app/pic_report.hpp"
#include "cluster/distributed.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"
#include "pic/fingerprint.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct TtftArgs {
  std::string arch = "qwen3_5", preset = "small", json, store,
              modes = "full,prefix,pic,pic-addition";
  std::string junction = "8", dtype = "bf16";
  int segments = 16, segment_tokens = 512, corpus = 48, queries = 6, question_tokens = 32;
  double zipf = 1.0, memory_budget_mib = 1024;
  uint64_t seed = 1;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

// Queries of k distinct documents drawn by Zipf(s) popularity over the corpus, shuffled.
std::vector<pic::Query> make_trace(const TtftArgs& a, const std::vector<std::vector<int32_t>>& docs,
                                   int vocab, std::mt19937_64& rng) {
  std::vector<double> weight(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) weight[i] = 1.0 / std::pow(double(i + 1), a.zipf);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<pic::Query> out;
  for (int q = 0; q < a.queries; ++q) {
    std::vector<double> w = weight;
    pic::Query query;
    query.id = "q" + std::to_string(q);
    for (int s = 0; s < a.segments; ++s) {
      std::discrete_distribution<size_t> pick(w.begin(), w.end());
      const size_t d = pick(rng);
      w[d] = 0.0;  // without replacement
      query.segments.push_back(docs[d]);
    }
    std::shuffle(query.segments.begin(), query.segments.end(), rng);
    for (int t = 0; t < a.question_tokens; ++t) query.question.push_back(tok(rng));
    query.max_new_tokens = 1;
    out.push_back(std::move(query));
  }
  return out;
}

int run_bench_ttft(const TtftArgs& a) {
  require(a.segments > 0 && a.segment_tokens > 1 && a.queries > 0 && a.question_tokens > 0,
          "--segments, --segment-tokens (> 1), --queries and --question-tokens must be positive");
  require(a.corpus >= a.segments, "--corpus must hold at least --segments documents");
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const std::vector<std::string> modes = split(a.modes);
  for (const std::string& m : modes) pic::parse_mode(m);

  const model::ModelConfig cfg = model::preset_config(model::parse_arch(a.arch), a.preset);
  const auto tw = Clock::now();
  model::Model net(cfg, model::random_weights(cfg, a.seed));
  const std::string fingerprint = pic::model_fingerprint(net.config(), net.weights());
  std::printf(
      "model: %s preset %s, %d layers (%s), hidden %d, %.1f M parameters; "
      "built and fingerprinted in %.1f s\n",
      model::arch_name(cfg.arch), a.preset.c_str(), cfg.num_hidden_layers,
      cfg.layout_string().c_str(), cfg.hidden_size, net.weights().parameter_count() / 1e6,
      seconds_since(tw));
  require(int64_t(a.segments) * a.segment_tokens + a.question_tokens <= cfg.max_position_embeddings,
          "the queries would exceed the model's context of " +
              std::to_string(cfg.max_position_embeddings));

  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(a.corpus));
  for (auto& d : docs)
    for (int t = 0; t < a.segment_tokens; ++t) d.push_back(tok(rng));
  const std::vector<pic::Query> trace = make_trace(a, docs, cfg.vocab_size, rng);
  std::printf(
      "trace: %d queries x %d segments x %d tokens + %d question tokens (%lld-token "
      "prompts), corpus %d documents, Zipf s=%.2f\n",
      a.queries, a.segments, a.segment_tokens, a.question_tokens,
      static_cast<long long>(int64_t(a.segments) * a.segment_tokens + a.question_tokens), a.corpus,
      a.zipf);

  // Warm the store with every document the trace uses.
  const std::string store_path = a.store.empty()
                                     ? (std::filesystem::temp_directory_path() /
                                        ("hypic-bench-ttft-" + std::to_string(getpid()) + ".h5"))
                                           .string()
                                     : a.store;
  store::StoreOptions so;
  so.model_fingerprint = fingerprint;
  so.junction = junction.store_code();
  so.dtype = store::parse_dtype(a.dtype);
  json result = {{"bench", "ttft"},
                 {"arch", a.arch},
                 {"preset", a.preset},
                 {"segments", a.segments},
                 {"segment_tokens", a.segment_tokens},
                 {"question_tokens", a.question_tokens},
                 {"queries", a.queries},
                 {"corpus", a.corpus},
                 {"zipf", a.zipf},
                 {"junction", junction.to_string()},
                 {"dtype", a.dtype},
                 {"memory_budget_mib", a.memory_budget_mib}};
  {
    store::SegmentStore st = store::SegmentStore::create(store_path, so);
    cluster::WarmupOptions wo;  // the one warm-up path, here in this process alone
    wo.junction = junction;
    const cluster::WarmupResult warm =
        cluster::warmup_across_ranks(MPI_COMM_SELF, net, fingerprint, docs, &st, wo);
    const size_t n = warm.total;
    const double dt = warm.seconds;
    const auto stats = st.stats();
    std::printf("warm-up: %zu entries in %.1f s (%.0f tokens/s), store %.1f MiB (%s)\n", n, dt,
                double(n) * a.segment_tokens / dt, stats.file_bytes / 1048576.0, a.dtype.c_str());
    result["warmup_seconds"] = dt;
    result["store_bytes"] = stats.file_bytes;
  }

  struct Row {
    std::string name;
    std::vector<double> ttft;
    RunSummary summary;
  };
  std::vector<Row> rows;
  auto run_mode = [&](const std::string& name, pic::Mode mode, double budget_mib) {
    std::optional<store::SegmentStore> st;
    if (pic::uses_entries(mode))
      st = store::SegmentStore::open(store_path, fingerprint, junction.store_code(),
                                     store::OpenMode::kRead);
    pic::EngineOptions eo;
    eo.mode = mode;
    eo.junction = junction;
    eo.memory_budget_bytes = static_cast<size_t>(budget_mib * 1048576.0);
    pic::Engine engine(net, fingerprint, eo, st ? &*st : nullptr);
    RunSummary summary(mode, junction, eo.memory_budget_bytes);
    net.times().clear();
    for (const pic::Query& q : trace) summary.add(engine.run(q), std::nullopt);
    const model::ForwardTimes ft = net.times();
    summary.memory_bytes = engine.memory_bytes();
    const std::vector<double> t = summary.ttft_ms();
    std::printf("  %-22s ttft p50 %9.1f ms  p99 %9.1f ms   (%s)\n", name.c_str(), percentile(t, 50),
                percentile(t, 99), summary.one_line().c_str());
    std::fflush(stdout);
    if (pic::uses_entries(mode)) {
      std::printf(
          "    forward time inside (s, all queries): gdn proj %.2f conv %.2f rule %.2f out %.2f, "
          "attn proj %.2f core %.2f out %.2f, mlp %.2f, norms %.2f, lm_head %.2f\n",
          ft.gdn_proj, ft.gdn_conv, ft.gdn_rule, ft.gdn_out, ft.attn_proj, ft.attn_core,
          ft.attn_out, ft.mlp, ft.embed_norms, ft.lm_head);
    }
    rows.push_back({name, t, summary});
  };
  // One untimed query so that thread pools and allocations are warm for every mode.
  {
    pic::EngineOptions eo;
    eo.mode = pic::Mode::Full;
    pic::Engine warm(net, fingerprint, eo);
    warm.run(trace.front());
  }
  std::printf("TTFT per mode (%d queries each, same trace):\n", a.queries);
  for (const std::string& m : modes) run_mode(m, pic::parse_mode(m), a.memory_budget_mib);
  const bool has_pic = std::find(modes.begin(), modes.end(), "pic") != modes.end();
  if (has_pic) run_mode("pic (store reads only)", pic::Mode::Pic, 0.0);

  auto p50 = [&](const std::string& name) {
    for (const Row& r : rows)
      if (r.name == name) return percentile(r.ttft, 50);
    return 0.0;
  };
  json per_mode = json::object();
  for (const Row& r : rows) per_mode[r.name] = r.summary.metrics_json();
  result["modes"] = per_mode;
  if (has_pic) {
    const double pic50 = p50("pic");
    if (p50("prefix") > 0) {
      std::printf("ratio prefix/pic at p50: %.2fx\n", p50("prefix") / pic50);
      result["ratio_prefix_over_pic_p50"] = p50("prefix") / pic50;
    }
    if (p50("full") > 0) {
      std::printf("ratio full/pic at p50:   %.2fx\n", p50("full") / pic50);
      result["ratio_full_over_pic_p50"] = p50("full") / pic50;
    }
    for (const Row& r : rows) {
      if (r.name != "pic" && r.name != "pic (store reads only)") continue;
      const json ph = r.summary.metrics_json()["phase_ms_mean"];
      std::printf(
          "%s TTFT breakdown (mean ms): store reads %.1f, composition %.1f, junction "
          "recompute %.1f, question prefill %.1f, cold fill %.1f\n",
          r.name.c_str(), ph["store_read"].get<double>(), ph["composition"].get<double>(),
          ph["junction"].get<double>(), ph["question"].get<double>(),
          ph["cold_fill"].get<double>());
    }
  }
  if (a.store.empty()) std::filesystem::remove(store_path);
  if (!a.json.empty()) {
    write_text_file(a.json, result.dump(2) + "\n");
    std::printf("figures written to %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace

void add_bench_ttft(CLI::App& bench) {
  auto* sub =
      bench.add_subcommand("ttft", "Time to first token of every caching mode on a RAG-like trace");
  auto a = std::make_shared<TtftArgs>();
  sub->add_option("--arch", a->arch, "qwen3_5 | qwen3_next")->capture_default_str();
  sub->add_option("--preset", a->preset, "random model size: tiny, small, bench")
      ->capture_default_str();
  sub->add_option("--segments", a->segments, "segments per query")->capture_default_str();
  sub->add_option("--segment-tokens", a->segment_tokens, "tokens per segment")
      ->capture_default_str();
  sub->add_option("--corpus", a->corpus, "documents in the corpus")->capture_default_str();
  sub->add_option("--queries", a->queries, "timed queries per mode")->capture_default_str();
  sub->add_option("--question-tokens", a->question_tokens, "question suffix length")
      ->capture_default_str();
  sub->add_option("--zipf", a->zipf, "Zipf exponent of document popularity")->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window")->capture_default_str();
  sub->add_option("--dtype", a->dtype, "store element type")->capture_default_str();
  sub->add_option("--memory-budget", a->memory_budget_mib, "MiB for the memory tier / snapshots")
      ->capture_default_str();
  sub->add_option("--modes", a->modes, "comma-separated modes")->capture_default_str();
  sub->add_option("--store", a->store, "keep the warmed store at this path (default: temporary)");
  sub->add_option("--seed", a->seed, "seed of weights and trace")->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] { return run_bench_ttft(*a); });
}

}  // namespace hypic::app
