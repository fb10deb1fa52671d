#pragma once
// `hypic bench scaling`: one cold query split into segments of skewed lengths. Rank 0
// measures every segment's compute time and entry size, and the composition on its own.
// With N ranks it also serves the query with 1 … N−1 workers (LPT rebalanced as serve does,
// the same LPT plan kept static, and round-robin) and records what each worker computed.
// Then the discrete-event simulator (cluster/simulate.hpp), driven by the measured times,
// projects 1, 2, 8 and 16 workers.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "pic/junction.hpp"

namespace hypic::bench {

struct ScalingOptions {
  model::ModelConfig model;  // random weights of this config, drawn from `seed`
  pic::JunctionSpec junction = pic::JunctionSpec::parse("8");
  int64_t tokens = 8192;  // in the query's segments
  int segments = 12, question_tokens = 32;
  double skew = 1.0;  // segment i gets a share proportional to 1 / (i + 1)^skew
  uint64_t seed = 1;  // weights and tokens
};

struct ScalingSegment {
  int64_t tokens = 0;
  double compute_s = 0;  // computing its entry on rank 0
  double bytes = 0;      // its entry message
  double compose_s = 0;  // its share (by tokens) of the composition and junctions
};

struct ScalingMeasured {
  double ttft_s = 0;
  double speedup = 0;  // over 1 worker (over the one process when there are no workers)
  std::vector<double> worker_compute_s;  // per worker used
  std::vector<int64_t> worker_segments;  // per worker used
  int64_t steals = 0;
};

struct ScalingRow {
  int workers = 1;
  std::string policy;  // "lpt" (rebalanced), "lpt-static", "round-robin"
  double simulated_ttft_s = 0;
  double simulated_speedup = 0;
  int64_t simulated_steals = 0;
  std::optional<ScalingMeasured> measured;  // when this job had the workers
};

struct ScalingResult {
  bool root = false;  // rank 0; every other field is set on rank 0 only
  int ranks = 1;
  int blas_threads_per_rank = 1;
  std::vector<ScalingSegment> segments;  // in prompt order
  double compute_s = 0;                  // Σ segments' compute
  double composition_s = 0;              // composition and junctions
  double question_s = 0;                 // the question (the tail)
  double serial_ttft_s = 0;              // one process: compute + composition + question
  // Workers 1, 2, 3 … ranks−2, 8, 16; one policy for 1 worker, three for more.
  std::vector<ScalingRow> rows;
  double entry_bytes = 0;  // all entries' messages
};

// Rank 0's reports as the benchmark goes (segment lengths known; one process measured).
struct ScalingProgress {
  std::function<void(const ScalingResult&)> query_ready;
  std::function<void(const ScalingResult&)> serial_done;
};

// Collective over `comm`: rank 0 drives, every other rank serves as a scatter worker until
// rank 0 is done. Sets the BLAS threads of this rank to its share of the node's cores.
ScalingResult run_scaling(MPI_Comm comm, const ScalingOptions& options,
                          const ScalingProgress& progress = {});

}  // namespace hypic::bench
