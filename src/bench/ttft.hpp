#pragma once
// `hypic bench ttft`: time to first token of every caching mode on one RAG-like trace. A
// random corpus with Zipf popularity, k segments per query drawn by popularity and put in
// random order, a question suffix; the store is warmed first, then every mode answers the same
// queries, taking turns query by query (so that a slow spell of a shared machine falls on all
// modes alike).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"
#include "pic/engine.hpp"
#include "pic/junction.hpp"

namespace hypic::bench {

struct TtftOptions {
  model::ModelConfig model;  // random weights of this config, drawn from `seed`
  std::vector<std::string> modes = {"full", "prefix", "pic", "pic-addition"};
  pic::JunctionSpec junction = pic::JunctionSpec::parse("8");
  std::string dtype = "bf16";  // store element type
  std::string store;           // keep the warmed store here; empty: a temporary file
  int segments = 16, segment_tokens = 512, corpus = 48, queries = 6, question_tokens = 32;
  double zipf = 1.0, memory_budget_mib = 1024;
  uint64_t seed = 1;                          // weights and trace
  const kernels::Backend* backend = nullptr;  // where the model computes (null: the host)
};

// One mode's run over the whole trace.
struct TtftModeRun {
  std::string name;  // the mode's name, or "pic (store reads only)" (pic, no memory tier)
  pic::Mode mode = pic::Mode::Full;
  size_t memory_budget_bytes = 0;
  std::vector<pic::QueryResult> results;  // one per query, without logits or hidden states
  std::vector<double> ttft_ms;            // one per query
  double ttft_p50_ms = 0;
  size_t memory_bytes = 0;      // the engine's memory tier / snapshots after the trace
  model::ForwardTimes forward;  // forward-pass time inside, all queries together
};

struct TtftResult {
  int segments = 0;  // per query, in this result's trace
  // The model and trace.
  double parameter_count = 0;
  double build_seconds = 0;   // random weights and fingerprint
  int64_t prompt_tokens = 0;  // per query
  // The store warm-up.
  size_t warmup_entries = 0;
  double warmup_seconds = 0;
  uint64_t store_bytes = 0;
  // Every mode asked for, in order, then "pic (store reads only)" when pic is among them.
  std::vector<TtftModeRun> modes;
  // p50 ratios, when pic and the other mode ran.
  std::optional<double> ratio_prefix_over_pic_p50, ratio_full_over_pic_p50;
};

// Called as the benchmark goes, so that a long run reports each step when it is done.
struct TtftProgress {
  std::function<void(const TtftResult&)> model_ready;   // model built, corpus made
  std::function<void(const TtftResult&)> store_warmed;  // warm-up fields set
  std::function<void(const TtftResult&)> trace_ready;   // a sweep's next segment count
  std::function<void(const TtftResult&)> trace_done;    // its modes ran, ratios set
  // After each query of the trace, once every mode has answered it: (answered, of). The
  // progress of a long trace (a 64k-token sweep point takes minutes per query).
  std::function<void(int, int)> query_done;
  // Once per mode after the trace: the modes take turns query by query, so none is done
  // before the last query.
  std::function<void(const TtftModeRun&)> mode_done;
};

TtftResult run_ttft(const TtftOptions& options, const TtftProgress& progress = {});

// The same for several segment counts (context lengths) on one model and one warmed store:
// the corpus holds max(options.corpus, the largest count) documents, and each count gets its
// own trace (options.segments is ignored). One result per count, in order; the model and
// warm-up fields are the same in each.
std::vector<TtftResult> run_ttft_sweep(const TtftOptions& options,
                                       const std::vector<int>& segment_counts,
                                       const TtftProgress& progress = {});

}  // namespace hypic::bench
