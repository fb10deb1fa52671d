#pragma once
// Handing a schedule's tasks to the workers a few at a time, with stealing at the tail.
//
// A static plan (LPT on predicted costs) is only as good as the prediction and the
// assumption that every worker runs at the same speed. On a shared node a worker that shares
// its core with rank 0, or with another job, runs slower than planned, and the query waits
// for it. The dispatcher keeps each worker at most `depth` tasks ahead (one computing, the
// next already queued so the worker never waits for a message), and when a worker's own
// list is used up it takes the last unsent task of the worker expected to finish last, if it
// would finish it sooner (docs/cluster.md, "Dispatch"). Which worker computes a segment does
// not change its entry, so results stay bit-identical; only the times change.
//
// Pure bookkeeping: no MPI here (cluster/distributed.cpp sends what it returns).
#include <cstdint>
#include <deque>
#include <vector>

#include "cluster/lpt.hpp"

namespace hypic::cluster {

class Dispatcher {
 public:
  // `costs[i]`: predicted cost of task i (the ones `plan` was made from). `depth` >= 1: tasks
  // a worker holds at once. `steal`: whether a worker whose own list is done takes others'.
  Dispatcher(const Schedule& plan, std::vector<double> costs, int depth, bool steal);

  // The tasks to send to worker `w` (0-based) now, in order, until it holds `depth`.
  std::vector<int64_t> refill(int w);
  // The entry of task `task` from worker `w` has arrived (it no longer holds it). Throws
  // hypic::Error when `w` did not hold `task`.
  void finished(int w, int64_t task);

  bool all_sent() const { return unsent_ == 0; }
  int64_t stolen() const { return stolen_; }  // tasks run by another worker than planned
  int workers() const { return static_cast<int>(queue_.size()); }

 private:
  double held_cost(int w) const;
  double unsent_cost(int w) const;

  std::vector<double> costs_;
  std::vector<std::deque<int64_t>> queue_;  // per worker: planned tasks not yet sent
  std::vector<std::vector<int64_t>> held_;  // per worker: sent, entry not yet back
  int depth_;
  bool steal_;
  int64_t unsent_ = 0;
  int64_t stolen_ = 0;
};

}  // namespace hypic::cluster
