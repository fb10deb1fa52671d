#pragma once
// `hypic bench store`: how fast entries go into and out of segment stores, per writer count.
// Each writer is its own process (fork; the store is not thread-safe, and a sharded warm-up has
// one writer process per rank) with its own store file in one folder, as the shards of a
// sharded store: the entries are made before the clock starts (entries from a warm memory
// tier), so the figures are the store's own cost (encoding to the store's dtype, checksums,
// HDF5, two flushes per entry) and the file system's, not the model's. docs/store-scaling.md.
#include <cstdint>
#include <string>
#include <vector>

#include "hypic/tensor.hpp"

namespace hypic::bench {

struct StoreBenchOptions {
  std::string folder;        // where the writers' store files go (e.g. a tmpfs: /dev/shm/...)
  std::vector<int> writers;  // writer counts to measure, each a separate run
  int entries_per_writer = 16;
  double entry_mib = 16.0;  // one entry's values as float32 in memory
  DType dtype = DType::BF16;
  int reps = 3;  // runs per writer count; the median is kept
};

struct StoreBenchRow {
  int writers = 0;
  uint64_t entries = 0;       // written (and read) in one run, all writers together
  double stored_bytes = 0.0;  // in the store's dtype, all writers together
  double write_s = 0.0;       // first writer's start to last writer's end (median of reps)
  double read_s = 0.0;
  double write_GBps() const { return write_s > 0 ? stored_bytes / write_s / 1e9 : 0.0; }
  double read_GBps() const { return read_s > 0 ? stored_bytes / read_s / 1e9 : 0.0; }
  double write_entries_per_s() const { return write_s > 0 ? entries / write_s : 0.0; }
  double read_entries_per_s() const { return read_s > 0 ? entries / read_s : 0.0; }
};

// Measures every writer count in options.writers (hypic::Error on a bad option or a writer
// that fails, with its message). The store files are removed after each run.
std::vector<StoreBenchRow> run_store_bench(const StoreBenchOptions& options);

}  // namespace hypic::bench
