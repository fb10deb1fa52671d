#include "bench/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <utility>

#include "bench/timing.hpp"
#include "cluster/distributed.hpp"
#include "cluster/lpt.hpp"
#include "cluster/messages.hpp"
#include "cluster/simulate.hpp"
#include "cluster/world.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/threads.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"
#include "pic/fingerprint.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::bench {
namespace {

// Lengths that add up to `total`, share 1/(i+1)^skew each (at least 16 tokens), shuffled so
// the long ones are not all first.
std::vector<int64_t> skewed_lengths(int64_t total, int k, double skew, std::mt19937_64& rng) {
  std::vector<double> w(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += (w[static_cast<size_t>(i)] = 1.0 / std::pow(i + 1.0, skew));
  std::vector<int64_t> n(static_cast<size_t>(k));
  int64_t used = 0;
  for (int i = 0; i < k; ++i) {
    n[static_cast<size_t>(i)] =
        std::max<int64_t>(16, static_cast<int64_t>(std::floor(static_cast<double>(total) *
                                                              w[static_cast<size_t>(i)] / sum)));
    used += n[static_cast<size_t>(i)];
  }
  n[0] += std::max<int64_t>(0, total - used);  // rounding remainder to the longest
  std::shuffle(n.begin(), n.end(), rng);
  return n;
}

// Hands out entries computed beforehand: the composition then runs alone, so its time can be
// measured without any compute in it.
class PrecomputedSource : public pic::ColdSource {
 public:
  explicit PrecomputedSource(const std::vector<pic::SegmentEntry>& entries) : entries_(entries) {}
  void begin(const std::vector<pic::ColdSegment>&) override {}
  pic::SegmentEntry take(int64_t index) override { return entries_[static_cast<size_t>(index)]; }

 private:
  const std::vector<pic::SegmentEntry>& entries_;
};

struct Policy {
  const char* name;
  cluster::Policy policy;
  bool rebalance;
};
// LPT with rebalancing (what serve does), the same LPT plan kept static, and round-robin.
const Policy kPolicies[] = {{"lpt", cluster::Policy::kLpt, true},
                            {"lpt-static", cluster::Policy::kLpt, false},
                            {"round-robin", cluster::Policy::kRoundRobin, false}};

using MeasuredMap = std::map<std::pair<int, std::string>, ScalingMeasured>;

// 1. Every segment on its own: compute time and the size of its entry message.
std::vector<pic::SegmentEntry> measure_segments(model::Model& net, const ScalingOptions& a,
                                                const pic::Query& query, ScalingResult& r) {
  std::vector<pic::SegmentEntry> entries;
  for (size_t i = 0; i < query.segments.size(); ++i) {
    ScalingSegment& seg = r.segments[i];
    const int w = a.junction.tokens_for(seg.tokens);
    const auto t0 = Clock::now();
    entries.push_back(pic::compute_entry(net, query.segments[i], w));
    seg.compute_s = seconds_since(t0);
    r.compute_s += seg.compute_s;
    seg.bytes = static_cast<double>(
        cluster::serialize_entry(static_cast<int64_t>(i), "", pic::to_store_entry(entries.back()))
            .size());
    r.entry_bytes += seg.bytes;
  }
  return entries;
}

// 2. The driver's own work with every entry at hand: composition and junctions per segment
//    (spread by tokens), then the question (the tail; its rows' share of the junction pass).
void measure_driver(model::Model& net, const std::string& fingerprint, const ScalingOptions& a,
                    const pic::Query& query, const std::vector<pic::SegmentEntry>& entries,
                    ScalingResult& r) {
  pic::EngineOptions eo;
  eo.junction = a.junction;
  pic::Engine engine(net, fingerprint, eo, nullptr);
  PrecomputedSource pre(entries);
  engine.set_cold_source(&pre);
  const pic::QueryResult composed = engine.run(query);
  // The question runs as the last window of the junction pass (pic::compose_with_question):
  // that pass's time is split between the windows and the question (the tail) by their rows.
  const double question_rows = static_cast<double>(query.question.size());
  const double pass_rows =
      static_cast<double>(composed.tokens_recomputed) - static_cast<double>(query.prefix.size());
  r.question_s =
      composed.times.question + composed.times.junction * question_rows / std::max(1.0, pass_rows);
  r.composition_s =
      composed.times.composition + composed.times.junction + composed.times.question - r.question_s;
  for (ScalingSegment& seg : r.segments)
    seg.compose_s =
        r.composition_s * static_cast<double>(seg.tokens) / static_cast<double>(a.tokens);
  r.serial_ttft_s = r.compute_s + r.composition_s + r.question_s;
}

// 3. Served for real with 1 … N−1 workers, nothing cached between runs; then the workers stop.
MeasuredMap measure_workers(MPI_Comm comm, int ranks, model::Model& net,
                            const std::string& fingerprint, const ScalingOptions& a,
                            const pic::Query& query) {
  MeasuredMap measured;
  pic::EngineOptions eo;
  eo.junction = a.junction;
  cluster::RemoteColdSource cold(comm, net, cluster::CostModel(0.0, 1.0, 0.0));
  for (int m = 1; m < ranks; ++m)
    for (const Policy& p : kPolicies) {
      if (m == 1 && (p.policy != cluster::Policy::kLpt || !p.rebalance))
        continue;  // one worker: nothing to rebalance
      cold.set_plan(p.policy, m, p.rebalance);
      pic::Engine fresh(net, fingerprint, eo, nullptr);
      fresh.set_cold_source(&cold);
      const auto t0 = Clock::now();
      fresh.run(query);
      const cluster::DispatchStats& st = cold.last_query();
      measured[{m, p.name}] = {seconds_since(t0), 0.0, st.busy_s, st.segments, st.stolen};
    }
  cluster::shutdown_workers(comm);
  return measured;
}

// 4. Simulated from the measured times, planned with token counts as the live run does.
std::vector<ScalingRow> simulate_rows(const ScalingResult& r, MeasuredMap measured) {
  std::vector<cluster::SimSegment> sim;
  std::vector<double> planned;
  for (const ScalingSegment& s : r.segments) {
    cluster::SimSegment one;
    one.compute_s = s.compute_s;
    one.bytes = s.bytes;
    one.compose_s = s.compose_s;
    sim.push_back(one);
    planned.push_back(static_cast<double>(s.tokens));
  }
  std::vector<int> counts = {1, 2};
  for (int m = 3; m < r.ranks; ++m) counts.push_back(m);
  counts.push_back(8);
  counts.push_back(16);
  const double base = r.ranks > 1 ? measured[{1, "lpt"}].ttft_s : r.serial_ttft_s;
  std::vector<ScalingRow> rows;
  for (const int m : counts)
    for (const Policy& p : kPolicies) {
      cluster::SimConfig sc;
      sc.workers = m;
      sc.policy = p.policy;
      sc.rebalance = p.rebalance;
      sc.planned_cost = planned;
      sc.tail_s = r.question_s;
      const cluster::SimResult s = cluster::simulate(sim, sc);
      ScalingRow row{m, p.name, s.ttft_s, s.speedup, s.stolen, std::nullopt};
      const auto it = measured.find({m, p.name});
      if (it != measured.end()) {
        row.measured = it->second;
        row.measured->speedup = base / it->second.ttft_s;
      }
      rows.push_back(std::move(row));
      if (m == 1) break;  // one worker: every policy is the same
    }
  return rows;
}

}  // namespace

ScalingResult run_scaling(MPI_Comm comm, const ScalingOptions& a, const ScalingProgress& progress) {
  const cluster::WorldInfo world = cluster::describe_world(comm);
  ScalingResult r;
  r.ranks = world.size;
  r.blas_threads_per_rank = kernels::threads();  // set by the command (--threads)
  HYPIC_REQUIRE(
      a.segments > 0 && a.tokens >= 16LL * a.segments && a.question_tokens > 0,
      "--segments and --question-tokens must be positive, --tokens at least 16 per segment");
  const model::ModelConfig& cfg = a.model;
  HYPIC_REQUIRE(a.tokens + a.question_tokens <= cfg.max_position_embeddings,
                "--tokens plus the question exceed the model's context of " +
                    std::to_string(cfg.max_position_embeddings));
  model::Model net(cfg, model::random_weights(cfg, a.seed));
  if (world.rank != 0) {
    cluster::run_worker(comm, net, a.junction);
    return r;
  }
  r.root = true;
  const std::string fingerprint = pic::model_fingerprint(net.config(), net.weights());
  std::mt19937_64 rng(a.seed);
  const std::vector<int64_t> lengths = skewed_lengths(a.tokens, a.segments, a.skew, rng);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  pic::Query query;
  query.id = "scaling";
  for (const int64_t n : lengths) {
    std::vector<int32_t> s(static_cast<size_t>(n));
    for (auto& t : s) t = tok(rng);
    query.segments.push_back(std::move(s));
    r.segments.push_back({n, 0.0, 0.0, 0.0});
  }
  for (int t = 0; t < a.question_tokens; ++t) query.question.push_back(tok(rng));
  query.max_new_tokens = 1;
  if (progress.query_ready) progress.query_ready(r);

  const std::vector<pic::SegmentEntry> entries = measure_segments(net, a, query, r);
  measure_driver(net, fingerprint, a, query, entries, r);
  if (progress.serial_done) progress.serial_done(r);

  MeasuredMap measured;
  if (world.size == 1)
    measured[{1, "lpt"}] = {r.serial_ttft_s, 0.0, {}, {}, 0};  // rank 0 is the one worker
  else
    measured = measure_workers(comm, world.size, net, fingerprint, a, query);
  r.rows = simulate_rows(r, std::move(measured));
  return r;
}

}  // namespace hypic::bench
