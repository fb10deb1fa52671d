// `hypic bench store`: write and read GB/s of segment entries per writer count (bench/store_bw);
// and the warm-up part of `hypic bench scaling` (--warmup-config): warm-up throughput and the
// TTFT of a long cold query for 1-64 nodes x 1-8 workers per node, with one writer and with
// per-node writers (cluster/warmup_sim, cluster/simulate). docs/store-scaling.md.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/bench_store.hpp"
#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "bench/store_bw.hpp"
#include "cluster/simulate.hpp"
#include "cluster/warmup_sim.hpp"
#include "model/config_info.hpp"
#include "store/entry.hpp"

namespace hypic::app {
namespace {

struct StoreArgs {
  bench::StoreBenchOptions o;
  std::string writers = "1,2", dtype = "bf16";
};

int run_bench_store(StoreArgs& a) {
  a.o.writers = parse_count_list(a.writers, "--writers", 256);
  a.o.dtype = store::parse_dtype(a.dtype);
  const std::vector<bench::StoreBenchRow> rows = bench::run_store_bench(a.o);
  std::printf(
      "store bench: %d entries of %.1f MiB (f32 in memory) per writer, stored as %s, in %s; "
      "median of %d runs\n",
      a.o.entries_per_writer, a.o.entry_mib, a.dtype.c_str(), a.o.folder.c_str(), a.o.reps);
  std::printf(
      "writers  entries  write s   write GB/s  entries/s   read s   read GB/s  entries/s  "
      "write vs 1 writer\n");
  for (const bench::StoreBenchRow& r : rows) {
    std::printf(
        "%7d  %7llu  %7.3f  %10.2f  %9.1f  %7.3f  %10.2f  %9.1f  %6.2fx\n", r.writers,
        static_cast<unsigned long long>(r.entries), r.write_s, r.write_GBps(),
        r.write_entries_per_s(), r.read_s, r.read_GBps(), r.read_entries_per_s(),
        rows.front().write_entries_per_s() > 0
            ? r.write_entries_per_s() / rows.front().write_entries_per_s() * rows.front().writers
            : 0.0);
  }
  std::printf("(write vs 1 writer: write entries/s over the first row's entries/s per writer)\n");
  return 0;
}

}  // namespace

void add_bench_store(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "store",
      "Write and read GB/s of segment entries per writer count (one process per writer, "
      "each its own store file, as a sharded warm-up's ranks)");
  auto a = std::make_shared<StoreArgs>();
  sub->add_option("--dir", a->o.folder, "folder for the store files (a tmpfs: /dev/shm)")
      ->required();
  sub->add_option("--writers", a->writers, "writer counts, comma-separated")->capture_default_str();
  sub->add_option("--entries", a->o.entries_per_writer, "entries each writer puts")
      ->capture_default_str();
  sub->add_option("--entry-mib", a->o.entry_mib, "one entry's values in MiB of float32")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "stored element type: f32, bf16, f16")
      ->capture_default_str();
  sub->add_option("--reps", a->o.reps, "runs per writer count (the median is printed)")
      ->capture_default_str();
  on_run(sub, [a] { return run_bench_store(*a); });
}

// ---- the warm-up simulation of `bench scaling --warmup-config` ----

WarmupSimArgs::WarmupSimArgs() = default;

int run_warmup_simulation(const WarmupSimArgs& a) {
  HYPIC_REQUIRE(a.segment_tokens >= 1 && a.query_tokens >= 1 && a.query_tokens <= 100000000,
                "bench scaling: --segment-tokens must be >= 1 and --query-tokens in [1, 1e8]");
  HYPIC_REQUIRE(std::isfinite(a.compose_ms) && a.compose_ms >= 0,
                "bench scaling: --compose-ms must be >= 0");
  const model::ConfigSummary s = model::summarize_config(read_json_file(a.config));
  auto entry_bytes = [&](int64_t tokens) {
    return static_cast<double>(s.entry_fixed_bytes) +
           static_cast<double>(s.entry_bytes_per_token) * static_cast<double>(tokens);
  };
  cluster::WarmupSimConfig c;
  c.segment_s = a.segment_ms / 1e3;
  c.entry_bytes = entry_bytes(a.segment_tokens);
  c.link_Bps = a.link_GBps * 1e9;
  c.writer_Bps = a.writer_GBps * 1e9;
  c.node_storage_Bps = a.node_storage_GBps * 1e9;
  c.fs_Bps = a.fs_GBps * 1e9;
  std::printf(
      "warm-up simulation: %s (%s), entry %.1f MB per %d-token segment (model info --config), "
      "%.1f ms per segment per worker, link %.1f GB/s, one writer %.2f GB/s, node storage %s, "
      "file system %s\n",
      a.config.c_str(), s.architecture.c_str(), c.entry_bytes / 1e6, a.segment_tokens, a.segment_ms,
      a.link_GBps, a.writer_GBps,
      a.node_storage_GBps > 0 ? (std::to_string(a.node_storage_GBps) + " GB/s").c_str() : "= link",
      a.fs_GBps > 0 ? (std::to_string(a.fs_GBps) + " GB/s").c_str() : "unlimited");
  // The cold query: segments of segment_tokens, the last one shorter.
  std::vector<cluster::SimSegment> query;
  for (int64_t left = a.query_tokens; left > 0; left -= a.segment_tokens) {
    const int64_t n = std::min<int64_t>(left, a.segment_tokens);
    cluster::SimSegment seg;
    seg.compute_s = c.segment_s * static_cast<double>(n) / a.segment_tokens;
    seg.bytes = entry_bytes(n);
    seg.compose_s = a.compose_ms / 1e3;
    query.push_back(seg);
  }
  std::printf(
      "\nnodes  workers/node  compute entries/s | single writer: entries/s    GB/s  bound        "
      "| per-node writers: entries/s    GB/s  bound             x(nodes x 1 node) | TTFT %lldk "
      "cold\n",
      static_cast<long long>(a.query_tokens / 1000));
  for (int w : {1, 2, 4, 8}) {
    c.nodes = 1;
    c.workers_per_node = w;
    const double one_node = cluster::simulate_warmup_per_node_writers(c).entries_per_s;
    for (int n : {1, 2, 4, 8, 16, 32, 64}) {
      c.nodes = n;
      const cluster::WarmupSimResult single = cluster::simulate_warmup_single_writer(c);
      const cluster::WarmupSimResult shards = cluster::simulate_warmup_per_node_writers(c);
      cluster::SimConfig q;
      q.workers = n * w;
      q.link.bandwidth_Bps = c.link_Bps;
      q.rebalance = true;
      q.tail_s = c.segment_s;  // the question's prefill, about one segment
      const cluster::SimResult t = cluster::simulate(query, q);
      std::printf(
          "%5d  %12d  %17.0f | %23.0f  %6.1f  %-12s | %26.0f  %6.1f  %-17s %6.2f | %6.3f s\n", n, w,
          static_cast<double>(n) * w / c.segment_s, single.entries_per_s, single.bytes_per_s / 1e9,
          single.bound.c_str(), shards.entries_per_s, shards.bytes_per_s / 1e9,
          shards.bound.c_str(), shards.entries_per_s / (n * one_node), t.ttft_s);
    }
  }
  std::printf(
      "(TTFT: LPT over nodes x workers, every entry through rank 0's link, %.1f ms composition per "
      "segment; the same for both writer modes: serving composes on rank 0)\n",
      a.compose_ms);
  return 0;
}

}  // namespace hypic::app
