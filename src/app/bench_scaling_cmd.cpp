// `hypic bench scaling`: one cold query split into segments of skewed lengths. Rank 0
// measures every segment's compute time and entry size, and the composition on its own.
// Under mpirun with N ranks it also serves the query with 1 … N−1 workers (LPT rebalanced as
// serve does, the same LPT plan kept static, and round-robin), and reports what each worker
// computed. Then the discrete-event simulator (cluster/simulate.hpp), driven by the measured
// times, projects 1, 2, 8 and 16 workers. Measured and simulated values are printed side by
// side; scripts/bench_scaling.sh repeats the run and prints medians.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "cluster/distributed.hpp"
#include "cluster/lpt.hpp"
#include "cluster/messages.hpp"
#include "cluster/simulate.hpp"
#include "cluster/world.hpp"
#include "common/error.hpp"
#include "hypic/kernels/blas.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"
#include "pic/fingerprint.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::app {
namespace {
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct ScalingArgs {
  std::string arch = "qwen3_5", preset = "small", json, junction = "8";
  int64_t tokens = 8192;
  int segments = 12, question_tokens = 32, ranks = 0;
  double skew = 1.0;  // segment i gets a share proportional to 1 / (i + 1)^skew
  uint64_t seed = 1;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

int run_bench_scaling(const ScalingArgs& a) {
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  const int threads = cluster::blas_threads_per_rank(world);
  kernels::set_blas_threads(threads);
  require(a.segments > 0 && a.tokens >= 16LL * a.segments && a.question_tokens > 0,
          "--segments and --question-tokens must be positive, --tokens at least 16 per segment");
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const model::ModelConfig cfg = model::preset_config(model::parse_arch(a.arch), a.preset);
  require(a.tokens + a.question_tokens <= cfg.max_position_embeddings,
          "--tokens plus the question exceed the model's context of " +
              std::to_string(cfg.max_position_embeddings));
  model::Model net(cfg, model::random_weights(cfg, a.seed));
  if (world.rank != 0) {
    cluster::run_worker(comm.get(), net, junction);
    return 0;
  }
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
  }
  for (int t = 0; t < a.question_tokens; ++t) query.question.push_back(tok(rng));
  query.max_new_tokens = 1;
  std::printf(
      "model: %s preset %s (%s); query: %lld tokens in %d segments (%s), %d ranks, "
      "%d BLAS threads per rank\n",
      model::arch_name(cfg.arch), a.preset.c_str(), cfg.layout_string().c_str(),
      static_cast<long long>(a.tokens), a.segments,
      [&] {
        std::string s;
        for (const int64_t n : lengths) s += (s.empty() ? "" : " ") + std::to_string(n);
        return s;
      }()
          .c_str(),
      world.size, threads);

  // 1. Every segment on its own: compute time and the size of its entry message.
  std::vector<pic::SegmentEntry> entries;
  std::vector<cluster::SimSegment> sim(lengths.size());
  double compute_total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int w = junction.tokens_for(lengths[i]);
    const auto t0 = Clock::now();
    entries.push_back(pic::compute_entry(net, query.segments[i], w));
    sim[i].compute_s = seconds_since(t0);
    compute_total += sim[i].compute_s;
    sim[i].bytes = static_cast<double>(
        cluster::serialize_entry(static_cast<int64_t>(i), "", pic::to_store_entry(entries.back()))
            .size());
  }
  // 2. The driver's own work with every entry at hand: composition and junctions per segment
  //    (spread by tokens), then the question (the tail).
  pic::EngineOptions eo;
  eo.junction = junction;
  pic::QueryResult composed;
  {
    pic::Engine engine(net, fingerprint, eo, nullptr);
    PrecomputedSource pre(entries);
    engine.set_cold_source(&pre);
    composed = engine.run(query);
  }
  const double compose_total = composed.times.composition + composed.times.junction;
  for (size_t i = 0; i < sim.size(); ++i)
    sim[i].compose_s =
        compose_total * static_cast<double>(lengths[i]) / static_cast<double>(a.tokens);
  const double tail = composed.times.question;
  const double serial = compute_total + compose_total + tail;
  std::printf("one process: compute %.2f s, composition %.3f s, question %.3f s: TTFT %.2f s\n",
              compute_total, compose_total, tail, serial);

  // 3. Served for real with 1 … N−1 workers: LPT with rebalancing (what serve does), the
  //    same LPT plan kept static, and round-robin (static).
  struct Mode {
    const char* name;
    cluster::Policy policy;
    bool rebalance;
  };
  const Mode modes[] = {{"lpt", cluster::Policy::kLpt, true},
                        {"lpt-static", cluster::Policy::kLpt, false},
                        {"round-robin", cluster::Policy::kRoundRobin, false}};
  struct Measured {
    double ttft_s = 0;
    cluster::DispatchStats stats;
  };
  std::map<std::pair<int, std::string>, Measured> measured;
  if (world.size == 1) measured[{1, "lpt"}] = {serial, {}};  // rank 0 is the one worker
  if (world.size > 1) {
    cluster::RemoteColdSource cold(comm.get(), net, cluster::CostModel(0.0, 1.0, 0.0));
    for (int m = 1; m < world.size; ++m)
      for (const Mode& mode : modes) {
        if (m == 1 && mode.policy != cluster::Policy::kLpt) continue;
        if (m == 1 && !mode.rebalance) continue;  // one worker: nothing to rebalance
        cold.set_plan(mode.policy, m, mode.rebalance);
        pic::Engine fresh(net, fingerprint, eo, nullptr);  // nothing cached between runs
        fresh.set_cold_source(&cold);
        const auto t0 = Clock::now();
        fresh.run(query);
        measured[{m, mode.name}] = {seconds_since(t0), cold.last_query()};
      }
    cluster::shutdown_workers(comm.get());
  }

  // 4. Simulated, from the measured times, planned with token counts as the live run does.
  std::vector<double> planned;
  for (const int64_t n : lengths) planned.push_back(static_cast<double>(n));
  std::vector<int> counts = {1, 2};
  for (int m = 3; m < world.size; ++m) counts.push_back(m);
  counts.push_back(8);
  counts.push_back(16);
  json rows = json::array();
  const double base = world.size > 1 ? measured[{1, "lpt"}].ttft_s : serial;
  std::printf(
      "\nworkers  policy       measured TTFT  speed-up  simulated TTFT  speed-up  "
      "measured worker compute s (segments), steals\n");
  for (const int m : counts)
    for (const Mode& mode : modes) {
      cluster::SimConfig sc;
      sc.workers = m;
      sc.policy = mode.policy;
      sc.rebalance = mode.rebalance;
      sc.planned_cost = planned;
      sc.tail_s = tail;
      const cluster::SimResult r = cluster::simulate(sim, sc);
      const auto it = measured.find({m, mode.name});
      json row = {{"workers", m},
                  {"policy", mode.name},
                  {"simulated_ttft_s", r.ttft_s},
                  {"simulated_speedup", r.speedup},
                  {"simulated_steals", r.stolen}};
      char meas[64];
      std::string workers_text;
      if (it != measured.end()) {
        const Measured& got = it->second;
        row["measured_ttft_s"] = got.ttft_s;
        row["measured_speedup"] = base / got.ttft_s;
        row["measured_worker_compute_s"] = got.stats.busy_s;
        row["measured_worker_segments"] = got.stats.segments;
        row["measured_steals"] = got.stats.stolen;
        std::snprintf(meas, sizeof meas, "%10.3f s  %6.2fx", got.ttft_s, base / got.ttft_s);
        for (size_t w = 0; w < got.stats.busy_s.size(); ++w) {
          char one[48];
          std::snprintf(one, sizeof one, "%s%.2f (%lld)", w == 0 ? "" : ", ", got.stats.busy_s[w],
                        static_cast<long long>(got.stats.segments[w]));
          workers_text += one;
        }
        if (!got.stats.busy_s.empty()) workers_text += "; " + std::to_string(got.stats.stolen);
      } else {
        std::snprintf(meas, sizeof meas, "%21s", "-");
      }
      std::printf("%7d  %-11s  %s  %12.3f s  %6.2fx  %s\n", m, mode.name, meas, r.ttft_s, r.speedup,
                  workers_text.c_str());
      rows.push_back(row);
      if (m == 1) break;  // one worker: every policy is the same
    }
  double entry_bytes = 0;
  for (const auto& s : sim) entry_bytes += s.bytes;
  std::printf(
      "(%ssimulated with a 10 GB/s link into rank 0; entries %.1f MiB in all)\n",
      world.size == 1 ? "measured with 1 worker: this one process computing and composing; " : "",
      entry_bytes / 1048576.0);
  if (!a.json.empty()) {
    json segs = json::array();
    for (size_t i = 0; i < sim.size(); ++i)
      segs.push_back({{"tokens", lengths[i]},
                      {"compute_s", sim[i].compute_s},
                      {"bytes", sim[i].bytes},
                      {"compose_s", sim[i].compose_s}});
    const json out = {{"bench", "scaling"},  {"arch", a.arch},
                      {"preset", a.preset},  {"tokens", a.tokens},
                      {"ranks", world.size}, {"blas_threads_per_rank", threads},
                      {"segments", segs},    {"serial_ttft_s", serial},
                      {"question_s", tail},  {"rows", rows}};
    write_text_file(a.json, out.dump(2) + "\n");
    std::printf("wrote %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace

void add_bench_scaling(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "scaling",
      "A cold query of skewed segments: measured with the workers there are (run under "
      "mpirun -n N), simulated for 1, 2, 8, 16 workers, LPT (rebalanced and static) against "
      "round-robin");
  auto a = std::make_shared<ScalingArgs>();
  sub->add_option("--arch", a->arch, "qwen3_5 | qwen3_next")->capture_default_str();
  sub->add_option("--preset", a->preset, "tiny | small | bench (random weights)")
      ->capture_default_str();
  sub->add_option("--tokens", a->tokens,
                  "tokens in the query's segments (32768 minus the question at most)")
      ->capture_default_str();
  sub->add_option("--segments", a->segments, "segments of skewed lengths")->capture_default_str();
  sub->add_option("--skew", a->skew, "segment i gets a share 1/(i+1)^skew")->capture_default_str();
  sub->add_option("--question-tokens", a->question_tokens, "question length")
      ->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window")->capture_default_str();
  sub->add_option("--seed", a->seed, "weights and tokens")->capture_default_str();
  sub->add_option("--ranks", a->ranks, "MPI ranks this job must have (0: any)")
      ->capture_default_str();
  sub->add_option("--json", a->json, "also write the numbers as JSON");
  on_run(sub, [a] { return run_bench_scaling(*a); });
}

}  // namespace hypic::app
