// `hypic bench scaling`: one cold query split into segments of skewed lengths, measured with
// the workers this job has (run under mpirun -n N) and simulated for 1, 2, 8 and 16 workers
// (bench/scaling.hpp measures; this command parses, calls and reports). Measured and
// simulated values are printed side by side; scripts/bench_scaling.sh repeats the run and
// prints medians.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/bench_store.hpp"
#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "bench/scaling.hpp"
#include "cluster/world.hpp"
#include "model/presets.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;

struct ScalingArgs {
  std::string arch = "qwen3_5", preset = "small", json, junction = "8", device;
  int ranks = 0;
  bench::ScalingOptions options;
  WarmupSimArgs warmup;
};

bench::ScalingProgress reporter(const ScalingArgs& a) {
  bench::ScalingProgress p;
  p.query_ready = [&a](const bench::ScalingResult& r) {
    const model::ModelConfig& cfg = a.options.model;
    std::string lengths;
    for (const bench::ScalingSegment& s : r.segments)
      lengths += (lengths.empty() ? "" : " ") + std::to_string(s.tokens);
    std::printf(
        "model: %s preset %s (%s); query: %lld tokens in %d segments (%s), %d ranks, "
        "%d BLAS threads per rank\n",
        model::arch_name(cfg.arch), a.preset.c_str(), cfg.layout_string().c_str(),
        static_cast<long long>(a.options.tokens), a.options.segments, lengths.c_str(), r.ranks,
        r.blas_threads_per_rank);
  };
  p.serial_done = [](const bench::ScalingResult& r) {
    std::printf("one process: compute %.2f s, composition %.3f s, question %.3f s: TTFT %.2f s\n",
                r.compute_s, r.composition_s, r.question_s, r.serial_ttft_s);
  };
  return p;
}

void print_row(const bench::ScalingRow& row) {
  char meas[64];
  std::string workers_text;
  if (row.measured) {
    const bench::ScalingMeasured& got = *row.measured;
    std::snprintf(meas, sizeof meas, "%10.3f s  %6.2fx", got.ttft_s, got.speedup);
    for (size_t w = 0; w < got.worker_compute_s.size(); ++w) {
      char one[48];
      std::snprintf(one, sizeof one, "%s%.2f (%lld)", w == 0 ? "" : ", ", got.worker_compute_s[w],
                    static_cast<long long>(got.worker_segments[w]));
      workers_text += one;
    }
    if (!got.worker_compute_s.empty()) workers_text += "; " + std::to_string(got.steals);
  } else {
    std::snprintf(meas, sizeof meas, "%21s", "-");
  }
  std::printf("%7d  %-11s  %s  %12.3f s  %6.2fx  %s\n", row.workers, row.policy.c_str(), meas,
              row.simulated_ttft_s, row.simulated_speedup, workers_text.c_str());
}

void print_table(const bench::ScalingResult& r) {
  std::printf(
      "\nworkers  policy       measured TTFT  speed-up  simulated TTFT  speed-up  "
      "measured worker compute s (segments), steals\n");
  for (const bench::ScalingRow& row : r.rows) print_row(row);
  std::printf(
      "(%ssimulated with a 10 GB/s link into rank 0; entries %.1f MiB in all)\n",
      r.ranks == 1 ? "measured with 1 worker: this one process computing and composing; " : "",
      r.entry_bytes / 1048576.0);
}

json scaling_json(const ScalingArgs& a, const bench::ScalingResult& r) {
  json rows = json::array();
  for (const bench::ScalingRow& row : r.rows) {
    json j = {{"workers", row.workers},
              {"policy", row.policy},
              {"simulated_ttft_s", row.simulated_ttft_s},
              {"simulated_speedup", row.simulated_speedup},
              {"simulated_steals", row.simulated_steals}};
    if (row.measured) {
      j["measured_ttft_s"] = row.measured->ttft_s;
      j["measured_speedup"] = row.measured->speedup;
      j["measured_worker_compute_s"] = row.measured->worker_compute_s;
      j["measured_worker_segments"] = row.measured->worker_segments;
      j["measured_steals"] = row.measured->steals;
    }
    rows.push_back(j);
  }
  json segs = json::array();
  for (const bench::ScalingSegment& s : r.segments)
    segs.push_back({{"tokens", s.tokens},
                    {"compute_s", s.compute_s},
                    {"bytes", s.bytes},
                    {"compose_s", s.compose_s}});
  return {{"bench", "scaling"},         {"arch", a.arch},
          {"preset", a.preset},         {"tokens", a.options.tokens},
          {"ranks", r.ranks},           {"blas_threads_per_rank", r.blas_threads_per_rank},
          {"segments", segs},           {"serial_ttft_s", r.serial_ttft_s},
          {"question_s", r.question_s}, {"rows", rows}};
}

int run_bench_scaling(ScalingArgs& a) {
  if (!a.warmup.config.empty()) return run_warmup_simulation(a.warmup);
  const DeviceChoice device = choose_device(a.device, /*device_path=*/false);
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  a.options.junction = pic::JunctionSpec::parse(a.junction);
  a.options.model = model::preset_config(model::parse_arch(a.arch), a.preset);
  const bench::ScalingResult r = bench::run_scaling(comm.get(), a.options, reporter(a));
  if (!r.root) return 0;
  print_device(device);
  print_table(r);
  if (!a.json.empty()) {
    write_text_file(a.json, scaling_json(a, r).dump(2) + "\n");
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
  bench::ScalingOptions& o = a->options;
  sub->add_option("--arch", a->arch, "qwen3_5 | qwen3_next")->capture_default_str();
  sub->add_option("--preset", a->preset, "tiny | small | bench (random weights)")
      ->capture_default_str();
  sub->add_option("--tokens", o.tokens,
                  "tokens in the query's segments (32768 minus the question at most)")
      ->capture_default_str();
  sub->add_option("--segments", o.segments, "segments of skewed lengths")->capture_default_str();
  sub->add_option("--skew", o.skew, "segment i gets a share 1/(i+1)^skew")->capture_default_str();
  sub->add_option("--question-tokens", o.question_tokens, "question length")->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window")->capture_default_str();
  sub->add_option("--seed", o.seed, "weights and tokens")->capture_default_str();
  sub->add_option("--ranks", a->ranks, "MPI ranks this job must have (0: any)")
      ->capture_default_str()
      ->check(non_negative_count());
  sub->add_option("--json", a->json, "also write the numbers as JSON");
  add_device_option(sub, a->device);
  WarmupSimArgs& w = a->warmup;
  sub->add_option("--warmup-config", w.config,
                  "instead of the query: simulate warm-up throughput (single writer and per-node "
                  "writers) and a cold query's TTFT for 1-64 nodes x 1-8 workers, entry sizes "
                  "from this config.json");
  sub->add_option("--segment-ms", w.segment_ms, "warm-up: one worker's time per segment")
      ->capture_default_str();
  sub->add_option("--segment-tokens", w.segment_tokens, "warm-up: tokens per segment")
      ->capture_default_str();
  sub->add_option("--link-GBps", w.link_GBps, "warm-up: a node's link (rank 0's inbound too)")
      ->capture_default_str();
  sub->add_option("--writer-GBps", w.writer_GBps,
                  "warm-up: one writer's store bandwidth (hypic bench store measures it)")
      ->capture_default_str();
  sub->add_option("--node-storage-GBps", w.node_storage_GBps,
                  "warm-up: a node's bandwidth to the file system (0: the link's)")
      ->capture_default_str();
  sub->add_option("--fs-GBps", w.fs_GBps, "warm-up: the file system in all (0: no limit)")
      ->capture_default_str();
  sub->add_option("--query-tokens", w.query_tokens, "warm-up: the cold query for the TTFT column")
      ->capture_default_str();
  sub->add_option("--compose-ms", w.compose_ms, "warm-up: rank 0's composition per segment")
      ->capture_default_str();
  on_run(sub, [a] { return run_bench_scaling(*a); });
}

}  // namespace hypic::app
