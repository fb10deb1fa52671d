#include "cluster/warmup_sim.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "hypic/error.hpp"

namespace hypic::cluster {
namespace {

void check(const WarmupSimConfig& c) {
  HYPIC_REQUIRE(c.nodes >= 1 && c.workers_per_node >= 1,
                "warm-up simulation: nodes and workers per node must be >= 1");
  auto positive = [](double v, const char* what) {
    HYPIC_REQUIRE(std::isfinite(v) && v > 0,
                  std::string("warm-up simulation: ") + what + " must be > 0");
  };
  positive(c.segment_s, "segment time");
  positive(c.entry_bytes, "entry size");
  positive(c.link_Bps, "link bandwidth");
  positive(c.writer_Bps, "writer bandwidth");
  HYPIC_REQUIRE(std::isfinite(c.node_storage_Bps) && c.node_storage_Bps >= 0 &&
                    std::isfinite(c.fs_Bps) && c.fs_Bps >= 0 && std::isfinite(c.message_s) &&
                    c.message_s >= 0,
                "warm-up simulation: storage bandwidths and message time must be >= 0");
}

// The slowest stage of `stages` (entries per second, name).
WarmupSimResult slowest(const WarmupSimConfig& c,
                        const std::vector<std::pair<double, const char*>>& stages) {
  WarmupSimResult r;
  r.entries_per_s = std::numeric_limits<double>::infinity();
  for (const auto& [rate, name] : stages) {
    if (rate < r.entries_per_s) {
      r.entries_per_s = rate;
      r.bound = name;
    }
  }
  r.bytes_per_s = r.entries_per_s * c.entry_bytes;
  return r;
}

double compute_rate(const WarmupSimConfig& c) {
  return static_cast<double>(c.nodes) * c.workers_per_node / c.segment_s;
}

double message_rate(const WarmupSimConfig& c) {
  return c.message_s > 0 ? 1.0 / c.message_s : std::numeric_limits<double>::infinity();
}

}  // namespace

WarmupSimResult simulate_warmup_single_writer(const WarmupSimConfig& c) {
  check(c);
  // The entries of node 0's workers reach rank 0 through shared memory; the others' share
  // rank 0's one inbound link.
  const double remote_share = static_cast<double>(c.nodes - 1) / c.nodes;
  const double link = remote_share > 0 ? c.link_Bps / (c.entry_bytes * remote_share)
                                       : std::numeric_limits<double>::infinity();
  double writer = c.writer_Bps;
  if (c.node_storage_Bps > 0) writer = std::min(writer, c.node_storage_Bps);
  if (c.fs_Bps > 0) writer = std::min(writer, c.fs_Bps);
  return slowest(c, {{compute_rate(c), "compute"},
                     {link, "rank 0 link"},
                     {writer / c.entry_bytes, "one writer"},
                     {message_rate(c), "rank 0 messages"}});
}

WarmupSimResult simulate_warmup_per_node_writers(const WarmupSimConfig& c) {
  check(c);
  const double node_storage = c.node_storage_Bps > 0 ? c.node_storage_Bps : c.link_Bps;
  const double per_node = std::min(c.workers_per_node * c.writer_Bps, node_storage);
  std::vector<std::pair<double, const char*>> stages = {
      {compute_rate(c), "compute"},
      {c.nodes * per_node / c.entry_bytes,
       c.workers_per_node * c.writer_Bps <= node_storage ? "writers" : "node storage link"},
      {message_rate(c), "rank 0 receipts"}};
  if (c.fs_Bps > 0) stages.push_back({c.fs_Bps / c.entry_bytes, "file system"});
  return slowest(c, stages);
}

}  // namespace hypic::cluster
