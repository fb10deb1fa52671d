#pragma once
// `hypic bench qps`: sustainable queries per second under a TTFT SLA, per caching mode.
// An open-loop load generator (Poisson arrivals at a swept rate) replays one RAG-like trace
// (Zipf document popularity, a random number of segments per query, a share of cold segments
// that no store has: corpus updates) against a serving loop: one engine that, whenever it is
// free, takes every query that has arrived and serves them in arrival order. A query's TTFT
// is its wait in the queue plus its own time to first token, both on the same clock.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "pic/junction.hpp"

namespace hypic::bench {

struct QpsOptions {
  model::ModelConfig model;  // random weights of this config, drawn from `seed`
  std::vector<std::string> modes = {"full", "prefix", "pic"};
  pic::JunctionSpec junction = pic::JunctionSpec::parse("8");
  std::string dtype = "bf16";  // store element type
  std::string store;           // keep the warmed store here; empty: a temporary file
  int corpus = 64, segment_tokens = 128, min_segments = 8, max_segments = 32;
  int question_tokens = 16, queries = 16;
  double zipf = 1.0;
  double cold_share = 0.1;       // each segment is a fresh document with this probability
  bool popularity_order = true;  // segments by popularity rank (favours prefix) or shuffled
  double sla_ms = 0;             // p99 TTFT bound; 0: twice the slowest mode's unloaded p99
  std::vector<double> loads = {0.5, 0.8, 1.0, 1.3};  // × each mode's capacity
  int refine_steps = 2;  // bisections between the last rate within the SLA and the next
  double memory_budget_mib = 1024;
  uint64_t seed = 1;  // weights, corpus, trace and arrivals
};

// One query of the trace: which corpus documents (or fresh ones) in which order, and its
// arrival gap at rate 1 (an Exp(1) draw; at rate λ the gap is gap / λ).
struct QpsTraceQuery {
  std::vector<int64_t> documents;  // corpus index, or −1 − i for the i-th fresh document
  double gap = 0;
};

// One offered load of one mode.
struct QpsPoint {
  double rate = 0;  // offered queries per second
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double service_mean_ms = 0;  // per query, TTFT phases and the answer's decode
  double utilization = 0;      // busy time / span from the first arrival to the last finish
  double offered_load = 0;     // rate × mean service time (≥ 1: the queue grows without end)
  bool within_sla = false;     // p99 TTFT ≤ SLA and offered_load < 1
};

struct QpsModeResult {
  std::string mode;
  double unloaded_ttft_p50_ms = 0, unloaded_ttft_p99_ms = 0, unloaded_service_ms = 0;
  double capacity_qps = 0;       // 1 / unloaded mean service
  std::vector<QpsPoint> points;  // by rate, ascending
  double sustainable_qps = 0;    // the highest rate measured within_sla (0: none)
};

struct QpsResult {
  double parameter_count = 0;
  size_t warmup_entries = 0;
  double warmup_seconds = 0;
  std::vector<QpsTraceQuery> trace;
  int64_t prompt_tokens_mean = 0;
  double cold_segments_share = 0;  // of all segments in the trace
  double sla_ms = 0;               // the bound used
  std::vector<QpsModeResult> modes;
};

struct QpsProgress {
  std::function<void(const QpsResult&)> store_warmed;    // model, trace and store ready
  std::function<void(const QpsModeResult&)> calibrated;  // a mode's unloaded run
  std::function<void(const QpsResult&)> sla_set;         // every mode calibrated
  std::function<void(const QpsModeResult&, const QpsPoint&)> point_done;
};

QpsResult run_qps(const QpsOptions& options, const QpsProgress& progress = {});

}  // namespace hypic::bench
