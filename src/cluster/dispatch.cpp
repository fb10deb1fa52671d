#include "cluster/dispatch.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "hypic/error.hpp"

namespace hypic::cluster {

Dispatcher::Dispatcher(const Schedule& plan, std::vector<double> costs, int depth, bool steal)
    : costs_(std::move(costs)),
      queue_(plan.tasks.size()),
      held_(plan.tasks.size()),
      depth_(depth),
      steal_(steal) {
  HYPIC_REQUIRE(depth >= 1, "dispatch depth must be at least 1, got " + std::to_string(depth));
  for (size_t w = 0; w < plan.tasks.size(); ++w)
    for (const int64_t t : plan.tasks[w]) {
      HYPIC_REQUIRE(t >= 0 && static_cast<size_t>(t) < costs_.size(),
                    "dispatch: task " + std::to_string(t) + " has no cost");
      queue_[w].push_back(t);
      ++unsent_;
    }
}

double Dispatcher::held_cost(int w) const {
  double c = 0;
  for (const int64_t t : held_[static_cast<size_t>(w)]) c += costs_[static_cast<size_t>(t)];
  return c;
}

double Dispatcher::unsent_cost(int w) const {
  double c = 0;
  for (const int64_t t : queue_[static_cast<size_t>(w)]) c += costs_[static_cast<size_t>(t)];
  return c;
}

std::vector<int64_t> Dispatcher::refill(int w) {
  HYPIC_REQUIRE(w >= 0 && w < workers(), "dispatch: no worker " + std::to_string(w));
  const size_t me = static_cast<size_t>(w);
  std::vector<int64_t> out;
  while (static_cast<int>(held_[me].size()) < depth_) {
    int64_t task = -1;
    if (!queue_[me].empty()) {
      task = queue_[me].front();
      queue_[me].pop_front();
    } else if (steal_) {
      // The victim: the worker with the most work left (held + unsent) among those with
      // unsent tasks; its last one (last in prompt order, the one composed last) moves here
      // when this worker, with what it holds, would be done with it sooner.
      int victim = -1;
      double victim_left = 0;
      for (int v = 0; v < workers(); ++v) {
        if (v == w || queue_[static_cast<size_t>(v)].empty()) continue;
        const double left = held_cost(v) + unsent_cost(v);
        if (victim < 0 || left > victim_left) victim = v, victim_left = left;
      }
      if (victim < 0) break;
      std::deque<int64_t>& q = queue_[static_cast<size_t>(victim)];
      if (held_cost(w) + costs_[static_cast<size_t>(q.back())] >= victim_left) break;
      task = q.back();
      q.pop_back();
      ++stolen_;
    } else {
      break;
    }
    held_[me].push_back(task);
    --unsent_;
    out.push_back(task);
  }
  return out;
}

void Dispatcher::finished(int w, int64_t task) {
  HYPIC_REQUIRE(w >= 0 && w < workers(), "dispatch: no worker " + std::to_string(w));
  std::vector<int64_t>& h = held_[static_cast<size_t>(w)];
  const auto it = std::find(h.begin(), h.end(), task);
  HYPIC_REQUIRE(it != h.end(), "dispatch: worker " + std::to_string(w) + " did not hold task " +
                                   std::to_string(task));
  h.erase(it);
}

}  // namespace hypic::cluster
