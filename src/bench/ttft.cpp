#include "bench/ttft.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/rag_corpus.hpp"
#include "bench/timing.hpp"
#include "common/units.hpp"
#include "hypic/error.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/fingerprint.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"

namespace hypic::bench {
namespace {

// Queries of k distinct documents drawn by Zipf(s) popularity over the corpus, shuffled.
// Queries of k distinct documents drawn by Zipf(s) popularity over the corpus, shuffled.
std::vector<pic::Query> make_trace(const TtftOptions& a, int segments,
                                   const std::vector<std::vector<int32_t>>& docs, int vocab,
                                   std::mt19937_64& rng) {
  const std::vector<double> weight = zipf_weights(docs.size(), a.zipf);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<pic::Query> out;
  for (int q = 0; q < a.queries; ++q) {
    pic::Query query;
    query.id = "q" + std::to_string(q);
    for (const size_t d : draw_distinct(weight, segments, rng)) query.segments.push_back(docs[d]);
    std::shuffle(query.segments.begin(), query.segments.end(), rng);
    for (int t = 0; t < a.question_tokens; ++t) query.question.push_back(tok(rng));
    query.max_new_tokens = 1;
    out.push_back(std::move(query));
  }
  return out;
}

struct Setup {
  model::Model& net;
  const std::string& fingerprint;
  const TtftOptions& options;
  const std::string& store_path;
  const std::vector<pic::Query>& trace;
};

// One mode's engine (and the store it reads) and its run so far.
struct ModeState {
  std::optional<store::SegmentStore> store;
  std::unique_ptr<pic::Engine> engine;
  TtftModeRun run;
};

std::unique_ptr<ModeState> open_mode(const Setup& s, const std::string& name, pic::Mode mode,
                                     double budget_mib) {
  auto m = std::make_unique<ModeState>();
  if (pic::uses_entries(mode))
    m->store = store::SegmentStore::open(s.store_path, s.fingerprint,
                                         s.options.junction.store_code(), store::OpenMode::kRead);
  pic::EngineOptions eo;
  eo.mode = mode;
  eo.junction = s.options.junction;
  eo.memory_budget_bytes = mib_to_bytes(budget_mib, "--memory-budget");
  m->engine =
      std::make_unique<pic::Engine>(s.net, s.fingerprint, eo, m->store ? &*m->store : nullptr);
  m->run.name = name;
  m->run.mode = mode;
  m->run.memory_budget_bytes = eo.memory_budget_bytes;
  return m;
}

// Every mode answers query 1, then every mode query 2, and so on: a slow spell of a shared
// machine then falls on all modes alike instead of on whichever mode ran during it. Each mode
// keeps its own engine (memory tier, prefix snapshots) and its own forward-time counters.
std::vector<TtftModeRun> run_modes(const Setup& s, std::vector<std::unique_ptr<ModeState>> modes,
                                   const TtftProgress& progress) {
  int answered = 0;
  for (const pic::Query& q : s.trace) {
    for (auto& m : modes) {
      s.net.times() = m->run.forward;
      pic::QueryResult r = m->engine->run(q);
      m->run.forward = s.net.times();
      m->run.ttft_ms.push_back(r.times.ttft * 1e3);
      r.first_logits = {};
      r.last_hidden = {};
      m->run.results.push_back(std::move(r));
    }
    if (progress.query_done) progress.query_done(++answered, static_cast<int>(s.trace.size()));
  }
  std::vector<TtftModeRun> runs;
  for (auto& m : modes) {
    m->run.memory_bytes = m->engine->memory_bytes();
    m->run.ttft_p50_ms = median(m->run.ttft_ms);
    runs.push_back(std::move(m->run));
  }
  s.net.times().clear();
  return runs;
}

std::optional<double> p50_ratio(const std::vector<TtftModeRun>& runs, const std::string& over) {
  double num = 0, pic50 = 0;
  for (const TtftModeRun& r : runs) {
    if (r.name == over) num = r.ttft_p50_ms;
    if (r.name == "pic") pic50 = r.ttft_p50_ms;
  }
  if (num > 0 && pic50 > 0) return num / pic50;
  return std::nullopt;
}

}  // namespace

std::vector<TtftResult> run_ttft_sweep(const TtftOptions& options,
                                       const std::vector<int>& segment_counts,
                                       const TtftProgress& progress) {
  HYPIC_REQUIRE(!segment_counts.empty(), "--segments needs at least one count");
  TtftOptions a = options;
  a.segments = *std::max_element(segment_counts.begin(), segment_counts.end());
  HYPIC_REQUIRE(
      *std::min_element(segment_counts.begin(), segment_counts.end()) > 0 && a.segment_tokens > 1 &&
          a.queries > 0 && a.question_tokens > 0,
      "--segments, --segment-tokens (> 1), --queries and --question-tokens must be positive");
  HYPIC_REQUIRE(a.corpus >= a.segments, "--corpus must hold at least --segments documents");
  HYPIC_REQUIRE(a.zipf >= 0 && a.zipf < 1e6, "--zipf must be a finite number >= 0");
  mib_to_bytes(a.memory_budget_mib, "--memory-budget");
  std::vector<pic::Mode> modes;
  for (const std::string& m : a.modes) modes.push_back(pic::parse_mode(m));
  store::parse_dtype(a.dtype);  // before the long steps: a wrong --dtype fails at once
  const model::ModelConfig& cfg = a.model;
  TtftResult common;

  const auto tw = Clock::now();
  model::ModelWeights weights = model::random_weights(cfg, a.seed);
  const std::string fingerprint = pic::model_fingerprint(cfg, weights);  // from host memory
  const kernels::Backend& be = a.backend != nullptr ? *a.backend : kernels::host_backend();
  model::Model net(cfg, model::to_backend(std::move(weights), be), be);
  common.build_seconds = seconds_since(tw);
  common.parameter_count = double(net.weights().parameter_count());
  common.segments = a.segments;
  common.prompt_tokens = int64_t(a.segments) * a.segment_tokens + a.question_tokens;
  HYPIC_REQUIRE(common.prompt_tokens <= cfg.max_position_embeddings,
                "the queries would exceed the model's context of " +
                    std::to_string(cfg.max_position_embeddings));

  std::mt19937_64 rng(a.seed);
  const std::vector<std::vector<int32_t>> docs =
      random_documents(a.corpus, a.segment_tokens, cfg.vocab_size, rng);
  if (progress.model_ready) progress.model_ready(common);

  const StorePath store(a.store, "hypic-bench-ttft");
  const std::string& store_path = store.str();
  const WarmedStore warmed = warm_store(net, fingerprint, a.junction, a.dtype, docs, store_path);
  common.warmup_entries = warmed.entries;
  common.warmup_seconds = warmed.seconds;
  common.store_bytes = warmed.file_bytes;
  if (progress.store_warmed) progress.store_warmed(common);

  std::vector<TtftResult> results;
  for (const int segments : segment_counts) {
    TtftResult result = common;
    result.segments = segments;
    result.prompt_tokens = int64_t(segments) * a.segment_tokens + a.question_tokens;
    const std::vector<pic::Query> trace = make_trace(a, segments, docs, cfg.vocab_size, rng);
    if (progress.trace_ready) progress.trace_ready(result);
    // One untimed query so that thread pools and allocations are warm for every mode.
    {
      pic::EngineOptions eo;
      eo.mode = pic::Mode::Full;
      pic::Engine(net, fingerprint, eo).run(trace.front());
    }
    const Setup setup{net, fingerprint, a, store_path, trace};
    std::vector<std::unique_ptr<ModeState>> states;
    for (size_t i = 0; i < modes.size(); ++i)
      states.push_back(open_mode(setup, a.modes[i], modes[i], a.memory_budget_mib));
    const bool has_pic = std::find(a.modes.begin(), a.modes.end(), "pic") != a.modes.end();
    if (has_pic) states.push_back(open_mode(setup, "pic (store reads only)", pic::Mode::Pic, 0.0));
    result.modes = run_modes(setup, std::move(states), progress);
    if (progress.mode_done)
      for (const TtftModeRun& run : result.modes) progress.mode_done(run);
    if (has_pic) {
      result.ratio_prefix_over_pic_p50 = p50_ratio(result.modes, "prefix");
      result.ratio_full_over_pic_p50 = p50_ratio(result.modes, "full");
    }
    if (progress.trace_done) progress.trace_done(result);
    results.push_back(std::move(result));
  }
  return results;
}

TtftResult run_ttft(const TtftOptions& a, const TtftProgress& progress) {
  return run_ttft_sweep(a, {a.segments}, progress).front();
}

}  // namespace hypic::bench
