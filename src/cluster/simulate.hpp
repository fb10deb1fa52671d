#pragma once
// A discrete-event simulation of one cold query served by m worker ranks and the rank-0
// combine driver, driven by per-segment times measured on real hardware. It projects the
// time to first token (TTFT) to worker counts the machine at hand cannot run, and shows what
// the scheduling policy, the link and send/compute overlap are worth. Model: docs/cluster.md.
#include <cstdint>
#include <vector>

#include "cluster/lpt.hpp"

namespace hypic::cluster {

struct SimSegment {
  double compute_s = 0.0;  // time one worker needs to compute the entry
  double bytes = 0.0;      // size of the entry message sent to the driver
  double compose_s = 0.0;  // driver time to compose it into the running state
  bool cached = false;     // a store hit: already on the driver, nothing to compute or send
};

struct LinkModel {
  double bandwidth_Bps = 10e9;  // bytes per second of one transfer
  double latency_s = 2e-6;      // added once per message
  // True: every entry goes through the driver's one inbound link, one transfer at a time
  // (rank 0 has one NIC, or shared memory bandwidth). False: only each worker's own outbound
  // link serialises its sends.
  bool shared_driver_link = true;
};

struct SimConfig {
  int workers = 1;
  Policy policy = Policy::kLpt;
  LinkModel link;
  // True: a worker posts the send and starts its next segment at once (MPI_Isend). False: it
  // waits until the entry has left before computing the next one.
  bool overlap_send = true;
  // Costs the scheduler plans with (for example the cost model's predictions), one per
  // segment; empty: plan with the true compute times.
  std::vector<double> planned_cost;
  // Driver work after the last composition until the first token (question prefill, decode).
  double tail_s = 0.0;
  // True: tasks go out through a Dispatcher (dispatch.hpp) `dispatch_depth` per worker, each
  // refill when an entry reaches the driver, and an idle worker takes the tail of a slower
  // one's list, as `hypic serve` does. False: every worker gets its planned list at once.
  bool rebalance = false;
  int dispatch_depth = 2;
};

struct SimResult {
  double ttft_s = 0.0;             // the query's time to first token
  double ttft_one_worker_s = 0.0;  // the same query with 1 worker and the same link
  double speedup = 1.0;            // ttft_one_worker_s / ttft_s
  double serial_s = 0.0;           // one process, no transfers: Σ compute + Σ compose + tail
  std::vector<double> busy_s;      // per worker: time spent computing
  std::vector<double> finish_s;    // per worker: when its last send completed
  std::vector<double> arrival_s;   // per segment: when the entry was on the driver
  std::vector<double> composed_s;  // per segment: when the driver had composed it
  Schedule schedule;               // the plan for the non-cached segments (before any steal)
  int64_t stolen = 0;              // segments computed by another worker than planned
};

// Throws hypic::Error on workers < 1, a negative or non-finite time or size, bandwidth <= 0,
// or a planned_cost of the wrong length.
SimResult simulate(const std::vector<SimSegment>& segments, const SimConfig& config);

}  // namespace hypic::cluster
