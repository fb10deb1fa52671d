#include "bench/qps.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include "bench/rag_corpus.hpp"
#include "bench/timing.hpp"
#include "common/units.hpp"
#include "eval/metrics.hpp"
#include "hypic/error.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"
#include "pic/fingerprint.hpp"
#include "store/segment_store.hpp"

namespace hypic::bench {
namespace {
constexpr int kBeyondGrid = 4;

struct Trace {
  std::vector<QpsTraceQuery> shape;  // what the JSON records
  std::vector<pic::Query> queries;
};

// Segments drawn by popularity (distinct within a query), each replaced by a fresh document
// with probability cold_share; a random question; an Exp(1) arrival gap.
Trace make_trace(const QpsOptions& a, const std::vector<std::vector<int32_t>>& docs, int vocab,
                 std::mt19937_64& rng) {
  const std::vector<double> weight = zipf_weights(docs.size(), a.zipf);
  std::uniform_int_distribution<int> count(a.min_segments, a.max_segments);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::bernoulli_distribution cold(a.cold_share);
  std::exponential_distribution<double> gap(1.0);
  Trace t;
  int64_t fresh = 0;
  for (int q = 0; q < a.queries; ++q) {
    std::vector<size_t> picked = draw_distinct(weight, count(rng), rng);
    if (a.popularity_order)
      std::sort(picked.begin(), picked.end());
    else
      std::shuffle(picked.begin(), picked.end(), rng);
    QpsTraceQuery shape;
    pic::Query query;
    query.id = "q" + std::to_string(q);
    for (const size_t d : picked) {
      if (cold(rng)) {  // a corpus update: a document no store has yet
        shape.documents.push_back(-1 - fresh++);
        query.segments.push_back(random_documents(1, a.segment_tokens, vocab, rng).front());
      } else {
        shape.documents.push_back(static_cast<int64_t>(d));
        query.segments.push_back(docs[d]);
      }
    }
    for (int i = 0; i < a.question_tokens; ++i) query.question.push_back(tok(rng));
    query.max_new_tokens = 1;
    shape.gap = gap(rng);
    t.shape.push_back(std::move(shape));
    t.queries.push_back(std::move(query));
  }
  return t;
}

struct Served {
  std::vector<double> ttft_ms;
  double service_seconds = 0;  // all queries
  double span_seconds = 0;     // first arrival to last finish
};

class Server {
 public:
  Server(model::Model& net, const std::string& fingerprint, const QpsOptions& a,
         const std::string& store_path)
      : net_(net), fingerprint_(fingerprint), a_(a), store_path_(store_path) {}

  // Serves the trace with arrivals at `rate` queries per second (rate 0: each query arrives
  // as the one before finishes, the unloaded case: no wait). A fresh engine each time, so every
  // load point starts from the same state (memory tier empty, the store as warmed; cold segments
  // are computed where they occur).
  Served serve(pic::Mode mode, const Trace& trace, double rate) const {
    std::optional<store::SegmentStore> st;
    if (pic::uses_entries(mode))
      st = store::SegmentStore::open(store_path_, fingerprint_, a_.junction.store_code(),
                                     store::OpenMode::kRead);
    pic::EngineOptions eo;
    eo.mode = mode;
    eo.junction = a_.junction;
    eo.memory_budget_bytes = mib_to_bytes(a_.memory_budget_mib, "--memory-budget");
    pic::Engine engine(net_, fingerprint_, eo, st ? &*st : nullptr);

    const size_t n = trace.queries.size();
    std::vector<double> arrival(n);
    double t = 0;
    for (size_t i = 0; i < n; ++i) {
      if (rate > 0) t += trace.shape[i].gap / rate;
      arrival[i] = t;
    }
    // The server's clock: it jumps over idle gaps (nothing runs then) and advances by each
    // query's measured time while serving, so a query's TTFT is its wait plus its own TTFT.
    Served out;
    double now = 0;
    size_t next = 0;
    while (next < n) {
      now = std::max(now, arrival[next]);
      size_t batch_end = next;  // every query that has arrived by now
      while (batch_end < n && arrival[batch_end] <= now) ++batch_end;
      for (; next < batch_end; ++next) {
        const auto t0 = Clock::now();
        const pic::QueryResult r = engine.run(trace.queries[next]);
        const double took = seconds_since(t0);
        // Unloaded (rate 0): each query arrives when the one before has finished.
        const double wait = rate > 0 ? now - arrival[next] : 0.0;
        out.ttft_ms.push_back((wait + r.times.ttft) * 1e3);
        out.service_seconds += took;
        now += took;
      }
    }
    out.span_seconds = now - arrival.front();
    return out;
  }

 private:
  model::Model& net_;
  const std::string& fingerprint_;
  const QpsOptions& a_;
  const std::string& store_path_;
};

QpsPoint point_of(const Served& s, double rate, double sla_ms) {
  QpsPoint p;
  p.rate = rate;
  p.ttft_p50_ms = eval::percentile(s.ttft_ms, 50);
  p.ttft_p99_ms = eval::percentile(s.ttft_ms, 99);
  p.service_mean_ms = 1e3 * s.service_seconds / double(s.ttft_ms.size());
  p.utilization = s.span_seconds > 0 ? s.service_seconds / s.span_seconds : 1.0;
  p.offered_load = rate * s.service_seconds / double(s.ttft_ms.size());
  // A finite trace hides an overload (its queue holds at most the trace): the point counts
  // only when the server keeps up with the rate as well.
  p.within_sla = p.ttft_p99_ms <= sla_ms && p.offered_load < 1.0;
  return p;
}

}  // namespace

QpsResult run_qps(const QpsOptions& a, const QpsProgress& progress) {
  HYPIC_REQUIRE(a.min_segments > 0 && a.max_segments >= a.min_segments,
                "--segments-min must be positive and at most --segments-max");
  HYPIC_REQUIRE(a.corpus >= a.max_segments, "--corpus must hold at least --segments-max documents");
  HYPIC_REQUIRE(a.segment_tokens > 1 && a.queries > 0 && a.question_tokens > 0,
                "--segment-tokens (> 1), --queries and --question-tokens must be positive");
  HYPIC_REQUIRE(a.cold_share >= 0 && a.cold_share <= 1, "--cold-share must be in [0, 1]");
  HYPIC_REQUIRE(!a.loads.empty() && a.refine_steps >= 0, "--loads needs at least one value");
  for (double l : a.loads) HYPIC_REQUIRE(l > 0, "--loads must be positive");
  HYPIC_REQUIRE(a.sla_ms >= 0 && a.sla_ms < 1e12, "--sla-ms must be a finite number >= 0");
  HYPIC_REQUIRE(a.zipf >= 0 && a.zipf < 1e6, "--zipf must be a finite number >= 0");
  mib_to_bytes(a.memory_budget_mib, "--memory-budget");
  std::vector<pic::Mode> modes;
  for (const std::string& m : a.modes) modes.push_back(pic::parse_mode(m));
  HYPIC_REQUIRE(!modes.empty(), "--modes needs at least one mode");
  store::parse_dtype(a.dtype);
  const model::ModelConfig& cfg = a.model;
  const int64_t longest = int64_t(a.max_segments) * a.segment_tokens + a.question_tokens;
  HYPIC_REQUIRE(longest <= cfg.max_position_embeddings,
                "the longest query (" + std::to_string(longest) +
                    " tokens) would exceed the model's context of " +
                    std::to_string(cfg.max_position_embeddings));

  QpsResult result;
  model::Model net(cfg, model::random_weights(cfg, a.seed));
  const std::string fingerprint = pic::model_fingerprint(net.config(), net.weights());
  result.parameter_count = double(net.weights().parameter_count());
  std::mt19937_64 rng(a.seed);
  const auto docs = random_documents(a.corpus, a.segment_tokens, cfg.vocab_size, rng);
  const Trace trace = make_trace(a, docs, cfg.vocab_size, rng);
  result.trace = trace.shape;
  int64_t tokens = 0, segments = 0, cold = 0;
  for (const pic::Query& q : trace.queries) {
    tokens += int64_t(q.question.size());
    for (const auto& s : q.segments) tokens += int64_t(s.size());
  }
  for (const QpsTraceQuery& q : trace.shape)
    for (int64_t d : q.documents) {
      ++segments;
      cold += d < 0;
    }
  result.prompt_tokens_mean = tokens / a.queries;
  result.cold_segments_share = double(cold) / double(segments);

  const StorePath store(a.store, "hypic-bench-qps");
  const WarmedStore warm = warm_store(net, fingerprint, a.junction, a.dtype, docs, store.str());
  result.warmup_entries = warm.entries;
  result.warmup_seconds = warm.seconds;
  if (progress.store_warmed) progress.store_warmed(result);
  {  // one untimed query so that thread pools and allocations are warm for every mode
    pic::EngineOptions eo;
    eo.mode = pic::Mode::Full;
    pic::Engine(net, fingerprint, eo).run(trace.queries.front());
  }

  // Unloaded first (every mode), so that the SLA can be set from the slowest one.
  const Server server(net, fingerprint, a, store.str());
  for (size_t m = 0; m < modes.size(); ++m) {
    QpsModeResult mr;
    mr.mode = a.modes[m];
    const Served s = server.serve(modes[m], trace, 0.0);
    mr.unloaded_ttft_p50_ms = eval::percentile(s.ttft_ms, 50);
    mr.unloaded_ttft_p99_ms = eval::percentile(s.ttft_ms, 99);
    mr.unloaded_service_ms = 1e3 * s.service_seconds / double(a.queries);
    mr.capacity_qps = double(a.queries) / s.service_seconds;
    if (progress.calibrated) progress.calibrated(mr);
    result.modes.push_back(std::move(mr));
  }
  result.sla_ms = a.sla_ms;
  if (result.sla_ms == 0)
    for (const QpsModeResult& mr : result.modes)
      result.sla_ms = std::max(result.sla_ms, 2.0 * mr.unloaded_ttft_p99_ms);
  if (progress.sla_set) progress.sla_set(result);

  for (size_t m = 0; m < modes.size(); ++m) {
    QpsModeResult& mr = result.modes[m];
    auto measure = [&](double rate) {
      const QpsPoint p = point_of(server.serve(modes[m], trace, rate), rate, result.sla_ms);
      mr.points.push_back(p);
      if (progress.point_done) progress.point_done(mr, p);
      return p.within_sla;
    };
    // The load grid, stopping after the first rate past the SLA; then bisection between the
    // last rate within it and that one.
    double ok = 0, bad = 0;
    for (double load : a.loads) {
      const double rate = load * mr.capacity_qps;
      if (measure(rate)) {
        ok = std::max(ok, rate);
      } else {
        bad = rate;
        break;
      }
    }
    // Every load within the SLA (the unloaded pass underrated the mode): go on, 1.5× at a
    // time, up to kBeyondGrid more points.
    for (int i = 0; i < kBeyondGrid && bad == 0; ++i) {
      const double rate = 1.5 * ok;
      (measure(rate) ? ok : bad) = rate;
    }
    for (int i = 0; i < a.refine_steps && ok > 0 && bad > 0; ++i) {
      const double mid = 0.5 * (ok + bad);
      (measure(mid) ? ok : bad) = mid;
    }
    mr.sustainable_qps = ok;
    std::sort(mr.points.begin(), mr.points.end(),
              [](const QpsPoint& x, const QpsPoint& y) { return x.rate < y.rate; });
  }
  return result;
}

}  // namespace hypic::bench
