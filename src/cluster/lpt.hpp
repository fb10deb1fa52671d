#pragma once
// Assigning independent tasks (segments) to workers. LPT (longest processing time first onto
// the least-loaded worker) is the policy hypic uses; round-robin and contiguous split are the
// baselines it is measured against. All three are deterministic: the same costs always give
// the same schedule, on every rank.
#include <cstdint>
#include <string>
#include <vector>

namespace hypic::cluster {

enum class Policy { kLpt, kRoundRobin, kContiguous };

std::string policy_name(Policy policy);  // "lpt", "round-robin", "contiguous"
// Parses the names above; throws hypic::Error naming the choices.
Policy parse_policy(const std::string& text);

struct Schedule {
  // tasks[w]: the task indices worker w runs, in the order it runs them (ascending index, that
  // is prompt order, so the combine driver, which composes in prompt order, waits least).
  std::vector<std::vector<int64_t>> tasks;
  std::vector<double> load;  // load[w]: the sum of the costs of tasks[w]
  double makespan = 0.0;     // max load: the estimated time until the last worker is done

  int workers() const { return static_cast<int>(tasks.size()); }
  // worker_of()[i]: the worker task i is assigned to.
  std::vector<int> worker_of() const;
};

// Costs must be finite and >= 0; workers >= 1. Throws hypic::Error otherwise.
//
// LPT: tasks by decreasing cost (equal costs: lower index first), each onto the worker with the
// least load so far (equal loads: lower worker index). Its makespan is at most
// (4/3 - 1/(3m)) times the optimum on m workers (Graham 1969).
Schedule schedule_lpt(const std::vector<double>& costs, int workers);
// Task i to worker i mod m.
Schedule schedule_round_robin(const std::vector<double>& costs, int workers);
// Consecutive runs of tasks of (nearly) equal count: the first n mod m workers take
// ceil(n/m) tasks, the rest floor(n/m). Ignores the costs: the "uneven split" baseline.
Schedule schedule_contiguous(const std::vector<double>& costs, int workers);
Schedule make_schedule(Policy policy, const std::vector<double>& costs, int workers);

// A lower bound on the optimal makespan: max(largest cost, total / m).
double makespan_lower_bound(const std::vector<double>& costs, int workers);

}  // namespace hypic::cluster
