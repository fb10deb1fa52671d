#include "cluster/lpt.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <utility>

#include "hypic/error.hpp"

namespace hypic::cluster {

namespace {

void check_inputs(const std::vector<double>& costs, int workers) {
  HYPIC_REQUIRE(workers >= 1,
                "scheduling needs at least one worker, got " + std::to_string(workers));
  for (size_t i = 0; i < costs.size(); ++i) {
    HYPIC_REQUIRE(std::isfinite(costs[i]) && costs[i] >= 0.0,
                  "task " + std::to_string(i) + " has cost " + std::to_string(costs[i]) +
                      "; costs must be finite and >= 0");
  }
}

// Fills load and makespan from the assignment and puts each worker's tasks in prompt order.
Schedule finish(std::vector<std::vector<int64_t>> tasks, const std::vector<double>& costs) {
  Schedule s;
  s.tasks = std::move(tasks);
  s.load.assign(s.tasks.size(), 0.0);
  for (size_t w = 0; w < s.tasks.size(); ++w) {
    std::sort(s.tasks[w].begin(), s.tasks[w].end());
    // Summed in task order, so that equal assignments give bit-identical loads.
    for (int64_t t : s.tasks[w]) s.load[w] += costs[static_cast<size_t>(t)];
    s.makespan = std::max(s.makespan, s.load[w]);
  }
  return s;
}

}  // namespace

std::string policy_name(Policy policy) {
  switch (policy) {
    case Policy::kLpt:
      return "lpt";
    case Policy::kRoundRobin:
      return "round-robin";
    case Policy::kContiguous:
      return "contiguous";
  }
  return "?";
}

Policy parse_policy(const std::string& text) {
  if (text == "lpt") return Policy::kLpt;
  if (text == "round-robin" || text == "rr") return Policy::kRoundRobin;
  if (text == "contiguous") return Policy::kContiguous;
  throw Error("unknown scheduling policy '" + text + "'; choose lpt, round-robin or contiguous");
}

std::vector<int> Schedule::worker_of() const {
  size_t n = 0;
  for (const auto& list : tasks) n += list.size();
  std::vector<int> owner(n, -1);
  for (size_t w = 0; w < tasks.size(); ++w) {
    for (int64_t t : tasks[w]) owner[static_cast<size_t>(t)] = static_cast<int>(w);
  }
  return owner;
}

Schedule schedule_lpt(const std::vector<double>& costs, int workers) {
  check_inputs(costs, workers);
  std::vector<int64_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return costs[static_cast<size_t>(a)] > costs[static_cast<size_t>(b)];
  });

  // Min-heap on (load, worker): the least-loaded worker, lowest index among equals.
  using Slot = std::pair<double, int>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  for (int w = 0; w < workers; ++w) heap.emplace(0.0, w);
  std::vector<std::vector<int64_t>> tasks(static_cast<size_t>(workers));
  for (int64_t t : order) {
    auto [load, w] = heap.top();
    heap.pop();
    tasks[static_cast<size_t>(w)].push_back(t);
    heap.emplace(load + costs[static_cast<size_t>(t)], w);
  }
  return finish(std::move(tasks), costs);
}

Schedule schedule_round_robin(const std::vector<double>& costs, int workers) {
  check_inputs(costs, workers);
  std::vector<std::vector<int64_t>> tasks(static_cast<size_t>(workers));
  for (size_t t = 0; t < costs.size(); ++t) {
    tasks[t % static_cast<size_t>(workers)].push_back(static_cast<int64_t>(t));
  }
  return finish(std::move(tasks), costs);
}

Schedule schedule_contiguous(const std::vector<double>& costs, int workers) {
  check_inputs(costs, workers);
  const size_t n = costs.size();
  const size_t m = static_cast<size_t>(workers);
  std::vector<std::vector<int64_t>> tasks(m);
  size_t next = 0;
  for (size_t w = 0; w < m; ++w) {
    const size_t count = n / m + (w < n % m ? 1 : 0);
    for (size_t k = 0; k < count; ++k) tasks[w].push_back(static_cast<int64_t>(next++));
  }
  return finish(std::move(tasks), costs);
}

Schedule make_schedule(Policy policy, const std::vector<double>& costs, int workers) {
  switch (policy) {
    case Policy::kLpt:
      return schedule_lpt(costs, workers);
    case Policy::kRoundRobin:
      return schedule_round_robin(costs, workers);
    case Policy::kContiguous:
      return schedule_contiguous(costs, workers);
  }
  throw Error("unknown scheduling policy");
}

double makespan_lower_bound(const std::vector<double>& costs, int workers) {
  check_inputs(costs, workers);
  double total = 0.0;
  double largest = 0.0;
  for (double c : costs) {
    total += c;
    largest = std::max(largest, c);
  }
  return std::max(largest, total / workers);
}

}  // namespace hypic::cluster
