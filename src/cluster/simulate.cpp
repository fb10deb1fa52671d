#include "cluster/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <tuple>

#include "cluster/dispatch.hpp"
#include "hypic/error.hpp"

namespace hypic::cluster {

namespace {

void check_nonnegative(double value, const std::string& what) {
  HYPIC_REQUIRE(
      std::isfinite(value) && value >= 0.0,
      "simulation input " + what + " = " + std::to_string(value) + " must be finite and >= 0");
}

void validate(const std::vector<SimSegment>& segments, const SimConfig& config) {
  HYPIC_REQUIRE(config.workers >= 1,
                "the simulation needs at least one worker, got " + std::to_string(config.workers));
  HYPIC_REQUIRE(std::isfinite(config.link.bandwidth_Bps) && config.link.bandwidth_Bps > 0.0,
                "link bandwidth must be > 0 bytes/s");
  check_nonnegative(config.link.latency_s, "link latency");
  check_nonnegative(config.tail_s, "tail time");
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string at = " of segment " + std::to_string(i);
    check_nonnegative(segments[i].compute_s, "compute time" + at);
    check_nonnegative(segments[i].bytes, "entry size" + at);
    check_nonnegative(segments[i].compose_s, "composition time" + at);
  }
  HYPIC_REQUIRE(config.planned_cost.empty() || config.planned_cost.size() == segments.size(),
                "planned_cost has " + std::to_string(config.planned_cost.size()) + " values for " +
                    std::to_string(segments.size()) + " segments");
}

enum class EventKind { kComputeDone, kSendLeft };

struct Event {
  double time;
  int64_t seq;  // insertion order: equal times are handled first come, first served
  EventKind kind;
  int worker;
  int64_t segment;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

struct Transfer {
  int worker;
  int64_t segment;
};

// Runs the workers and links; fills busy, finish and arrival times. Tasks reach a worker
// through the dispatcher, as in the live run: refilled when one of its entries arrives.
class Engine {
 public:
  Engine(const std::vector<SimSegment>& segments, const SimConfig& config,
         const std::vector<int64_t>& cold, Dispatcher& dispatcher, SimResult& out)
      : segments_(segments), config_(config), cold_(cold), dispatcher_(dispatcher), out_(out) {
    const size_t m = static_cast<size_t>(dispatcher.workers());
    local_.assign(m, {});
    computing_.assign(m, false);
    out_busy_.assign(m, false);
  }

  void run() {
    // Task messages reach every worker one latency after the query starts.
    for (int w = 0; w < dispatcher_.workers(); ++w) {
      refill(w);
      start_next(w, config_.link.latency_s);
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      const size_t w = static_cast<size_t>(e.worker);
      if (e.kind == EventKind::kComputeDone) {
        computing_[w] = false;
        pending_.push_back({e.worker, e.segment});
        if (config_.overlap_send) start_next(e.worker, e.time);
      } else {
        out_busy_[w] = false;
        driver_busy_ = false;
        const double arrived = e.time + config_.link.latency_s;
        out_.arrival_s[static_cast<size_t>(e.segment)] = arrived;
        out_.finish_s[w] = std::max(out_.finish_s[w], e.time);
        dispatcher_.finished(e.worker, position_.at(e.segment));
        if (!config_.overlap_send) start_next(e.worker, e.time);
        // A refill reaches the worker one latency after the driver has the entry.
        if (refill(e.worker)) start_next(e.worker, arrived + config_.link.latency_s);
      }
      start_transfers(e.time);
    }
  }

 private:
  void push(double time, EventKind kind, int worker, int64_t segment) {
    events_.push(Event{time, seq_++, kind, worker, segment});
  }

  // What the dispatcher hands worker `w` now joins its queue; true when there was some.
  bool refill(int w) {
    const std::vector<int64_t> got = dispatcher_.refill(w);
    for (const int64_t pos : got) {
      const int64_t segment = cold_[static_cast<size_t>(pos)];
      position_[segment] = pos;
      local_[static_cast<size_t>(w)].push_back(segment);
    }
    return !got.empty();
  }

  void start_next(int worker, double now) {
    const size_t w = static_cast<size_t>(worker);
    if (computing_[w] || local_[w].empty()) return;
    const int64_t segment = local_[w].front();
    local_[w].pop_front();
    const double compute = segments_[static_cast<size_t>(segment)].compute_s;
    out_.busy_s[w] += compute;
    computing_[w] = true;
    push(now + compute, EventKind::kComputeDone, worker, segment);
  }

  // Oldest waiting send first, as long as its worker's link (and the driver's, when shared)
  // is free.
  void start_transfers(double now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      const size_t w = static_cast<size_t>(it->worker);
      const bool blocked = out_busy_[w] || (config_.link.shared_driver_link && driver_busy_);
      if (blocked) {
        ++it;
        continue;
      }
      out_busy_[w] = true;
      if (config_.link.shared_driver_link) driver_busy_ = true;
      const double wire =
          segments_[static_cast<size_t>(it->segment)].bytes / config_.link.bandwidth_Bps;
      push(now + wire, EventKind::kSendLeft, it->worker, it->segment);
      it = pending_.erase(it);
    }
  }

  const std::vector<SimSegment>& segments_;
  const SimConfig& config_;
  const std::vector<int64_t>& cold_;  // cold position -> segment
  Dispatcher& dispatcher_;
  SimResult& out_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
  std::vector<std::deque<int64_t>> local_;  // per worker: segments received, not started
  std::map<int64_t, int64_t> position_;     // segment -> cold position
  std::vector<bool> computing_;
  std::vector<bool> out_busy_;
  bool driver_busy_ = false;
  std::deque<Transfer> pending_;
};

}  // namespace

SimResult simulate(const std::vector<SimSegment>& segments, const SimConfig& config) {
  validate(segments, config);
  const size_t n = segments.size();
  const size_t m = static_cast<size_t>(config.workers);

  // Plan the cold segments only; hits never leave the driver.
  std::vector<int64_t> cold;
  std::vector<double> plan;
  for (size_t i = 0; i < n; ++i) {
    if (segments[i].cached) continue;
    cold.push_back(static_cast<int64_t>(i));
    plan.push_back(config.planned_cost.empty() ? segments[i].compute_s : config.planned_cost[i]);
  }
  SimResult result;
  result.schedule = make_schedule(config.policy, plan, config.workers);
  // Static: every worker gets its whole list at once and keeps it.
  const int depth = config.rebalance ? config.dispatch_depth : std::numeric_limits<int>::max();
  Dispatcher dispatcher(result.schedule, plan, depth, config.rebalance);

  result.busy_s.assign(m, 0.0);
  result.finish_s.assign(m, 0.0);
  result.arrival_s.assign(n, 0.0);
  result.composed_s.assign(n, 0.0);
  Engine(segments, config, cold, dispatcher, result).run();
  result.stolen = dispatcher.stolen();
  for (auto& list : result.schedule.tasks) {
    for (int64_t& t : list) t = cold[static_cast<size_t>(t)];  // cold position -> segment
  }

  // The driver composes in prompt order, each entry as soon as it and all before it are in.
  double driver = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double ready = segments[i].cached ? 0.0 : result.arrival_s[i];
    driver = std::max(driver, ready) + segments[i].compose_s;
    result.composed_s[i] = driver;
  }
  result.ttft_s = driver + config.tail_s;

  result.serial_s = config.tail_s;
  for (const SimSegment& s : segments) {
    result.serial_s += s.compose_s + (s.cached ? 0.0 : s.compute_s);
  }

  if (config.workers == 1) {
    result.ttft_one_worker_s = result.ttft_s;
  } else {
    SimConfig one = config;
    one.workers = 1;
    result.ttft_one_worker_s = simulate(segments, one).ttft_s;
  }
  result.speedup = result.ttft_s > 0.0 ? result.ttft_one_worker_s / result.ttft_s : 1.0;
  return result;
}

}  // namespace hypic::cluster
