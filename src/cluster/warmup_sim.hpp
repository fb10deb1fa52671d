#pragma once
// Warm-up throughput at cluster scale: where the entries' bytes go and which link or writer
// saturates first, for a single writer (rank 0; every entry crosses its inbound link) and
// for per-node writers (every worker puts its entries into its own shard; the workers of a
// node share that node's storage bandwidth). A steady-state bottleneck model: the warm-up
// runs at the slowest of its stages. docs/store-scaling.md.
#include <cstdint>
#include <string>

namespace hypic::cluster {

struct WarmupSimConfig {
  int nodes = 1;
  int workers_per_node = 1;   // computing ranks per node (GPUs); rank 0 is extra, on node 0
  double segment_s = 0.04;    // one worker's compute time for one segment entry
  double entry_bytes = 0;     // one stored entry
  double link_Bps = 25e9;     // a node's network link (rank 0's inbound link included)
  double writer_Bps = 1.5e9;  // one writer process putting entries into its own store file
  // A node's bandwidth to the store's file system (its writers share it); 0: the link's.
  double node_storage_Bps = 0;
  double fs_Bps = 0;  // the file system in all (0: no limit modelled)
  // rank 0's time per arriving message beside the payload (receiving, bookkeeping).
  double message_s = 5e-6;
};

struct WarmupSimResult {
  double entries_per_s = 0;
  double bytes_per_s = 0;
  std::string bound;  // the stage that sets the rate: "compute", "rank 0 link", "writer", ...
};

// Single writer: min(compute, rank 0's link for the entries of other nodes, one writer,
// rank 0's message rate). Throws hypic::Error on a non-positive count, time, size or bandwidth.
WarmupSimResult simulate_warmup_single_writer(const WarmupSimConfig& c);
// Per-node writers: min(compute, each node's writers (workers x writer, capped by the node's
// storage bandwidth) x nodes, the file system, rank 0's rate of receipts).
WarmupSimResult simulate_warmup_per_node_writers(const WarmupSimConfig& c);

}  // namespace hypic::cluster
