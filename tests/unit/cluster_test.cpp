// Unit tests of the cluster logic that needs no second rank: scheduling, the cost model, the
// simulator, the message formats and the world-size checks.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cluster/cost_model.hpp"
#include "cluster/dispatch.hpp"
#include "cluster/lifeline.hpp"
#include "cluster/lpt.hpp"
#include "cluster/messages.hpp"
#include "cluster/progress.hpp"
#include "cluster/simulate.hpp"
#include "cluster/watch.hpp"
#include "cluster/world.hpp"
#include "hypic/error.hpp"

namespace hypic::cluster {
namespace {
namespace cluster_test {

// ---- scheduling --------------------------------------------------------------------------

// Every task exactly once, each worker's list in ascending (prompt) order, loads consistent.
void expect_valid(const Schedule& s, const std::vector<double>& costs, int workers) {
  ASSERT_EQ(s.workers(), workers);
  std::vector<int> seen(costs.size(), 0);
  double makespan = 0.0;
  for (int w = 0; w < workers; ++w) {
    const auto& list = s.tasks[static_cast<size_t>(w)];
    EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
    double load = 0.0;
    for (int64_t t : list) {
      ++seen[static_cast<size_t>(t)];
      load += costs[static_cast<size_t>(t)];
    }
    EXPECT_DOUBLE_EQ(s.load[static_cast<size_t>(w)], load);
    makespan = std::max(makespan, load);
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  EXPECT_DOUBLE_EQ(s.makespan, makespan);
}

// The optimal makespan by trying every assignment (m^n of them; small n only).
double brute_force_optimum(const std::vector<double>& costs, int workers) {
  const size_t n = costs.size();
  std::vector<int> assign(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    std::vector<double> load(static_cast<size_t>(workers), 0.0);
    for (size_t i = 0; i < n; ++i) load[static_cast<size_t>(assign[i])] += costs[i];
    best = std::min(best, *std::max_element(load.begin(), load.end()));
    size_t i = 0;
    while (i < n && ++assign[i] == workers) assign[i++] = 0;
    if (i == n) break;
  }
  return best;
}

TEST(Lpt, KnownOptimalCases) {
  // Two workers, {3,3,2,2,2}: LPT gives 3+2+2 | 3+2 = 7, while the optimum is 6 (3+3 | 2+2+2).
  // A classic case where LPT is not optimal, within its bound 4/3 - 1/6 = 7/6.
  const std::vector<double> classic{3, 3, 2, 2, 2};
  const Schedule c = schedule_lpt(classic, 2);
  expect_valid(c, classic, 2);
  EXPECT_DOUBLE_EQ(c.makespan, 7.0);
  EXPECT_DOUBLE_EQ(brute_force_optimum(classic, 2), 6.0);

  // A case where LPT is optimal: {5,5,4,4,3,3} on 3 workers balances to 8 | 8 | 8.
  const std::vector<double> even{5, 5, 4, 4, 3, 3};
  const Schedule e = schedule_lpt(even, 3);
  expect_valid(e, even, 3);
  EXPECT_DOUBLE_EQ(e.makespan, 8.0);
  EXPECT_EQ(e.tasks[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(e.tasks[1], (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(e.tasks[2], (std::vector<int64_t>{2, 3}));
  // One long task dominates: the makespan is that task.
  const std::vector<double> dominated{10, 1, 1, 1, 1};
  EXPECT_DOUBLE_EQ(schedule_lpt(dominated, 3).makespan, 10.0);
  // More workers than tasks: one task each, the rest idle.
  const Schedule wide = schedule_lpt({5, 4}, 4);
  expect_valid(wide, {5, 4}, 4);
  EXPECT_DOUBLE_EQ(wide.makespan, 5.0);
  EXPECT_TRUE(wide.tasks[2].empty() && wide.tasks[3].empty());
  // Nothing to do.
  const Schedule none = schedule_lpt({}, 3);
  EXPECT_EQ(none.workers(), 3);
  EXPECT_DOUBLE_EQ(none.makespan, 0.0);
}

TEST(Lpt, WithinGrahamBoundOfBruteForceOptimumOnRandomInstances) {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> cost(0.1, 10.0);
  std::uniform_int_distribution<int> pick_n(1, 8);
  double worst_ratio = 0.0;
  for (int trial = 0; trial < 300; ++trial) {
    const int m = 2 + trial % 3;  // 2, 3, 4 workers
    const int n = pick_n(rng) + (m == 4 ? 0 : 1);
    std::vector<double> costs(static_cast<size_t>(n));
    for (double& c : costs) c = trial % 2 ? cost(rng) : std::round(cost(rng));  // ties, too
    const Schedule s = schedule_lpt(costs, m);
    expect_valid(s, costs, m);
    const double optimum = brute_force_optimum(costs, m);
    const double bound = 4.0 / 3.0 - 1.0 / (3.0 * m);
    EXPECT_LE(s.makespan, bound * optimum * (1 + 1e-12))
        << "trial " << trial << " m=" << m << " n=" << n;
    EXPECT_GE(s.makespan, optimum * (1 - 1e-12));
    EXPECT_GE(optimum, makespan_lower_bound(costs, m) * (1 - 1e-12));
    worst_ratio = std::max(worst_ratio, s.makespan / optimum);
  }
  std::printf("[lpt] worst LPT/optimum over 300 random instances: %.4f\n", worst_ratio);
}

TEST(Lpt, GrahamWorstCaseIsReached) {
  // The tight instance for m workers: 2m+1 tasks 2m-1, 2m-1, 2m-2, 2m-2, ..., m+1, m+1, m, m, m.
  for (int m = 2; m <= 4; ++m) {
    std::vector<double> costs;
    for (int c = 2 * m - 1; c > m; --c) costs.insert(costs.end(), {double(c), double(c)});
    costs.insert(costs.end(), {double(m), double(m), double(m)});
    const Schedule s = schedule_lpt(costs, m);
    EXPECT_DOUBLE_EQ(s.makespan, 4.0 * m - 1.0);
    EXPECT_DOUBLE_EQ(s.makespan / (3.0 * m), 4.0 / 3.0 - 1.0 / (3.0 * m));
  }
}

TEST(Lpt, DeterministicAndTieBreaksByIndex) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> cost(1, 5);  // many equal costs
  std::vector<double> costs(60);
  for (double& c : costs) c = cost(rng);
  const Schedule a = schedule_lpt(costs, 5);
  const Schedule b = schedule_lpt(costs, 5);
  EXPECT_EQ(a.tasks, b.tasks);
  EXPECT_EQ(a.load, b.load);
  // All equal: LPT deals them out like round-robin, in index order.
  const std::vector<double> equal(7, 1.0);
  EXPECT_EQ(schedule_lpt(equal, 3).tasks, schedule_round_robin(equal, 3).tasks);
}

TEST(Lpt, BaselinesAndPolicyNames) {
  const std::vector<double> costs{1, 2, 3, 4, 5, 6, 7};
  const Schedule rr = schedule_round_robin(costs, 3);
  expect_valid(rr, costs, 3);
  EXPECT_EQ(rr.tasks[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(rr.tasks[2], (std::vector<int64_t>{2, 5}));
  const Schedule split = schedule_contiguous(costs, 3);
  expect_valid(split, costs, 3);
  EXPECT_EQ(split.tasks[0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(split.tasks[1], (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(split.tasks[2], (std::vector<int64_t>{5, 6}));
  EXPECT_DOUBLE_EQ(split.makespan, 13.0);
  EXPECT_LE(schedule_lpt(costs, 3).makespan, split.makespan);
  EXPECT_EQ(split.worker_of(), (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));

  for (Policy p : {Policy::kLpt, Policy::kRoundRobin, Policy::kContiguous}) {
    EXPECT_EQ(parse_policy(policy_name(p)), p);
    expect_valid(make_schedule(p, costs, 2), costs, 2);
  }
  EXPECT_THROW(parse_policy("fastest"), Error);
  EXPECT_THROW(schedule_lpt(costs, 0), Error);
  EXPECT_THROW(schedule_lpt({1.0, -1.0}, 2), Error);
  EXPECT_THROW(schedule_lpt({std::nan("")}, 2), Error);
}

// ---- cost model --------------------------------------------------------------------------

TEST(CostModel, RecoversExactQuadratic) {
  const double a = 2e-3, b = 4e-5, c = 3e-9;
  std::vector<CostSample> samples;
  for (int64_t n : {16, 100, 512, 1000, 2048, 4096, 8000}) {
    samples.push_back({n, a + b * n + c * double(n) * double(n)});
  }
  const CostModel m = CostModel::fit(samples);
  EXPECT_NEAR(m.a(), a, 1e-9);
  EXPECT_NEAR(m.b(), b, 1e-11);
  EXPECT_NEAR(m.c(), c, 1e-14);
  EXPECT_LT(m.rms_residual(), 1e-9);
  EXPECT_NEAR(m.predict(3000), a + b * 3000 + c * 9e6, 1e-9);
  EXPECT_EQ(m.samples(), 7);
  EXPECT_EQ(m.min_tokens(), 16);
  EXPECT_EQ(m.max_tokens(), 8000);
}

TEST(CostModel, FitsNoisySamplesWithNonNegativeCoefficients) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.02);
  const double a = 0.01, b = 1e-4, c = 5e-9;
  std::vector<CostSample> samples;
  for (int rep = 0; rep < 5; ++rep) {
    for (int64_t n = 64; n <= 8192; n *= 2) {
      const double t = a + b * n + c * double(n) * double(n);
      samples.push_back({n, std::max(0.0, t * (1.0 + noise(rng)))});
    }
  }
  const CostModel m = CostModel::fit(samples);
  EXPECT_GE(m.a(), 0.0);
  EXPECT_GE(m.b(), 0.0);
  EXPECT_GE(m.c(), 0.0);
  for (int64_t n : {64, 1000, 4096, 8192}) {
    const double truth = a + b * n + c * double(n) * double(n);
    EXPECT_NEAR(m.predict(n), truth, 0.05 * truth) << n;
  }

  // Concave data would make unconstrained least squares choose c < 0 (and negative times
  // beyond the samples); the constrained fit keeps c >= 0 and predictions non-negative.
  std::vector<CostSample> concave;
  for (int64_t n : {100, 200, 400, 800, 1600}) concave.push_back({n, std::sqrt(double(n))});
  const CostModel k = CostModel::fit(concave);
  EXPECT_GE(k.c(), 0.0);
  EXPECT_GE(k.a(), 0.0);
  EXPECT_GE(k.predict(0), 0.0);
  EXPECT_GT(k.predict(100000), k.predict(1600));
}

TEST(CostModel, FewDistinctTokenCounts) {
  // One count: proportional to tokens.
  const CostModel one = CostModel::fit({{500, 1.0}, {500, 1.2}});
  EXPECT_DOUBLE_EQ(one.a(), 0.0);
  EXPECT_DOUBLE_EQ(one.c(), 0.0);
  EXPECT_NEAR(one.predict(500), 1.1, 1e-12);
  EXPECT_NEAR(one.predict(1000), 2.2, 1e-12);
  // Two counts: a line through both.
  const CostModel two = CostModel::fit({{100, 1.0}, {300, 2.0}});
  EXPECT_NEAR(two.predict(100), 1.0, 1e-12);
  EXPECT_NEAR(two.predict(300), 2.0, 1e-12);
  EXPECT_DOUBLE_EQ(two.c(), 0.0);
  // Only empty segments: a constant.
  EXPECT_NEAR(CostModel::fit({{0, 0.5}, {0, 0.7}}).predict(0), 0.6, 1e-12);

  EXPECT_THROW(CostModel::fit({}), Error);
  EXPECT_THROW(CostModel::fit({{-1, 1.0}}), Error);
  EXPECT_THROW(CostModel::fit({{10, std::nan("")}}), Error);
}

TEST(CostModel, JsonRoundTripAndFile) {
  CostModel m = CostModel::fit({{10, 0.1}, {100, 0.5}, {1000, 9.0}, {2000, 30.0}});
  m.provenance = "qwen3-next-tiny on test host";
  const CostModel back = CostModel::from_json(m.to_json());
  EXPECT_EQ(back.a(), m.a());
  EXPECT_EQ(back.b(), m.b());
  EXPECT_EQ(back.c(), m.c());
  EXPECT_EQ(back.samples(), m.samples());
  EXPECT_EQ(back.max_tokens(), 2000);
  EXPECT_EQ(back.provenance, m.provenance);

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("hypic_cost_model_" + std::to_string(::getpid()) + ".json"))
                               .string();
  m.save(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(CostModel::load(path).predict(1234), m.predict(1234));
  std::filesystem::remove(path);
  EXPECT_THROW(CostModel::load(path), Error);

  nlohmann::json bad = m.to_json();
  bad["version"] = 99;
  EXPECT_THROW(CostModel::from_json(bad), Error);
  bad = m.to_json();
  bad["c"] = -1.0;
  EXPECT_THROW(CostModel::from_json(bad), Error);
  bad = m.to_json();
  bad.erase("b");
  EXPECT_THROW(CostModel::from_json(bad), Error);
  EXPECT_THROW(CostModel::from_json(nlohmann::json::array()), Error);
}

// ---- simulation --------------------------------------------------------------------------

LinkModel free_link() {
  LinkModel link;
  link.latency_s = 0.0;
  link.bandwidth_Bps = 1e30;
  return link;
}

TEST(Simulate, ZeroTransferCostAndDivisibleWorkGivesSpeedupM) {
  for (int m : {1, 2, 3, 4, 8, 16}) {
    std::vector<SimSegment> segments(static_cast<size_t>(4 * m), SimSegment{0.25, 0.0, 0.0});
    for (Policy p : {Policy::kLpt, Policy::kRoundRobin, Policy::kContiguous}) {
      SimConfig config;
      config.workers = m;
      config.policy = p;
      config.link = free_link();
      const SimResult r = simulate(segments, config);
      EXPECT_DOUBLE_EQ(r.ttft_s, 1.0) << policy_name(p) << " m=" << m;
      EXPECT_DOUBLE_EQ(r.ttft_one_worker_s, 1.0 * m);
      EXPECT_DOUBLE_EQ(r.speedup, m);
      EXPECT_DOUBLE_EQ(r.serial_s, 1.0 * m);
      for (double busy : r.busy_s) EXPECT_DOUBLE_EQ(busy, 1.0);
    }
  }
}

TEST(Simulate, InOrderCompositionWaitsForSlowestEarlierSegment) {
  // Segment 0 is slow (on worker 0), segments 1..3 are quick (workers 1, 2, 1 under
  // round-robin on 3 workers: 0->w0, 1->w1, 2->w2, 3->w0). Composition takes 0.1 s each.
  std::vector<SimSegment> segments{{5.0, 0, 0.1}, {1.0, 0, 0.1}, {1.0, 0, 0.1}, {1.0, 0, 0.1}};
  SimConfig config;
  config.workers = 3;
  config.policy = Policy::kRoundRobin;
  config.link = free_link();
  config.tail_s = 0.5;
  const SimResult r = simulate(segments, config);
  EXPECT_DOUBLE_EQ(r.arrival_s[0], 5.0);
  EXPECT_DOUBLE_EQ(r.arrival_s[1], 1.0);
  EXPECT_DOUBLE_EQ(r.arrival_s[2], 1.0);
  EXPECT_DOUBLE_EQ(r.arrival_s[3], 6.0);  // after segment 0 on the same worker
  // Segments 1 and 2 arrived long before, but wait for segment 0.
  EXPECT_DOUBLE_EQ(r.composed_s[0], 5.1);
  EXPECT_DOUBLE_EQ(r.composed_s[1], 5.2);
  EXPECT_DOUBLE_EQ(r.composed_s[2], 5.3);
  EXPECT_DOUBLE_EQ(r.composed_s[3], 6.1);
  EXPECT_DOUBLE_EQ(r.ttft_s, 6.6);
  for (size_t i = 0; i < segments.size(); ++i) {
    for (size_t j = 0; j <= i; ++j) EXPECT_GE(r.composed_s[i], r.arrival_s[j]);
  }
  EXPECT_DOUBLE_EQ(r.busy_s[0], 6.0);
  EXPECT_DOUBLE_EQ(r.busy_s[1], 1.0);
}

TEST(Simulate, LptBeatsRoundRobinAndContiguousOnSkewedSegments) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> skew(0.0, 1.0);
  int strictly_better = 0;
  double lpt_total = 0.0, rr_total = 0.0, split_total = 0.0;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<SimSegment> segments(24);
    for (SimSegment& s : segments) s = {0.01 * skew(rng), 2e6, 1e-4};
    SimConfig config;
    config.workers = 2 + trial % 7;
    config.link.bandwidth_Bps = 5e9;
    config.link.latency_s = 5e-6;
    config.policy = Policy::kLpt;
    const SimResult lpt = simulate(segments, config);
    config.policy = Policy::kRoundRobin;
    const SimResult rr = simulate(segments, config);
    config.policy = Policy::kContiguous;
    const SimResult split = simulate(segments, config);
    // LPT is not optimal, so a baseline can be lucky on one instance, but never by more than
    // Graham's factor: LPT <= (4/3 - 1/(3m)) * optimum <= (4/3 - 1/(3m)) * baseline.
    const double bound = 4.0 / 3.0 - 1.0 / (3.0 * config.workers);
    EXPECT_LE(lpt.schedule.makespan, bound * rr.schedule.makespan);
    EXPECT_LE(lpt.schedule.makespan, bound * split.schedule.makespan);
    if (lpt.speedup > rr.speedup && lpt.speedup > split.speedup) ++strictly_better;
    lpt_total += lpt.speedup;
    rr_total += rr.speedup;
    split_total += split.speedup;
  }
  std::printf(
      "[simulate] mean speed-up over 50 skewed queries: lpt %.2f, round-robin %.2f, "
      "contiguous %.2f; lpt best in %d\n",
      lpt_total / 50, rr_total / 50, split_total / 50, strictly_better);
  EXPECT_GE(strictly_better, 40);
  EXPECT_GT(lpt_total, 1.1 * rr_total);
  EXPECT_GT(lpt_total, 1.1 * split_total);

  // A constructed case: one long segment first, then short ones. Round-robin puts two long
  // tasks' worth on worker 0; LPT gives the long one a worker of its own.
  std::vector<SimSegment> skewed{{8, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0},
                                 {1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
  SimConfig config;
  config.workers = 2;
  config.link = free_link();
  config.policy = Policy::kLpt;
  EXPECT_DOUBLE_EQ(simulate(skewed, config).ttft_s, 8.0);
  config.policy = Policy::kRoundRobin;
  EXPECT_DOUBLE_EQ(simulate(skewed, config).ttft_s, 12.0);
  config.policy = Policy::kContiguous;
  EXPECT_DOUBLE_EQ(simulate(skewed, config).ttft_s, 12.0);
}

TEST(Simulate, TransfersOverlapComputeAndShareTheDriverLink) {
  // Two segments per worker, 1 s each, 0.5 s on the wire each.
  std::vector<SimSegment> segments(4, SimSegment{1.0, 0.5e9, 0.0});
  SimConfig config;
  config.workers = 2;
  config.policy = Policy::kRoundRobin;
  config.link.bandwidth_Bps = 1e9;
  config.link.latency_s = 0.0;
  config.link.shared_driver_link = false;
  config.overlap_send = true;
  // Per worker: compute 0-1, send 1-1.5 while computing 1-2, send 2-2.5.
  EXPECT_DOUBLE_EQ(simulate(segments, config).ttft_s, 2.5);
  config.overlap_send = false;
  // Per worker: compute 0-1, send 1-1.5, compute 1.5-2.5, send 2.5-3.
  EXPECT_DOUBLE_EQ(simulate(segments, config).ttft_s, 3.0);
  // Shared driver link with overlap: sends at 1-1.5, 1.5-2 (worker 1 waits), 2-2.5, 2.5-3.
  config.overlap_send = true;
  config.link.shared_driver_link = true;
  const SimResult shared = simulate(segments, config);
  EXPECT_DOUBLE_EQ(shared.ttft_s, 3.0);
  EXPECT_DOUBLE_EQ(shared.arrival_s[1], 2.0);
  // Latency is added once per message, and once for the task message at the start.
  config.link.latency_s = 0.01;
  EXPECT_NEAR(simulate(segments, config).ttft_s, 3.02, 1e-12);
}

TEST(Simulate, CachedSegmentsAndPlannedCosts) {
  std::vector<SimSegment> segments{
      {0, 0, 0.1, true}, {2.0, 0, 0.1}, {0, 0, 0.1, true}, {2.0, 0, 0.1}};
  SimConfig config;
  config.workers = 2;
  config.link = free_link();
  const SimResult r = simulate(segments, config);
  EXPECT_DOUBLE_EQ(r.arrival_s[0], 0.0);
  EXPECT_DOUBLE_EQ(r.composed_s[0], 0.1);
  EXPECT_DOUBLE_EQ(r.composed_s[1], 2.1);
  EXPECT_DOUBLE_EQ(r.ttft_s, 2.3);
  EXPECT_DOUBLE_EQ(r.serial_s, 4.4);
  EXPECT_EQ(r.schedule.tasks[0], (std::vector<int64_t>{1}));  // segment indices, not positions
  EXPECT_EQ(r.schedule.tasks[1], (std::vector<int64_t>{3}));

  // A wrong plan (it thinks segment 0 is cheap) costs time: LPT pairs 0 with 1 on one worker.
  std::vector<SimSegment> three{{4.0, 0, 0}, {2.0, 0, 0}, {2.0, 0, 0}};
  config.planned_cost = {1.0, 2.0, 2.0};
  EXPECT_DOUBLE_EQ(simulate(three, config).ttft_s, 6.0);
  config.planned_cost.clear();
  EXPECT_DOUBLE_EQ(simulate(three, config).ttft_s, 4.0);
  config.planned_cost = {1.0};
  EXPECT_THROW(simulate(three, config), Error);
  config.planned_cost.clear();
  config.workers = 0;
  EXPECT_THROW(simulate(three, config), Error);
  config.workers = 1;
  config.link.bandwidth_Bps = 0.0;
  EXPECT_THROW(simulate(three, config), Error);
}

// ---- dispatch ----------------------------------------------------------------------------

TEST(Dispatcher, StaticHandsEachWorkerItsWholeListInPlanOrder) {
  const std::vector<double> costs{5, 1, 1, 3, 2, 2};
  const Schedule plan = schedule_lpt(costs, 2);
  Dispatcher d(plan, costs, std::numeric_limits<int>::max(), false);
  EXPECT_EQ(d.refill(0), plan.tasks[0]);
  EXPECT_EQ(d.refill(1), plan.tasks[1]);
  EXPECT_TRUE(d.all_sent());
  EXPECT_TRUE(d.refill(0).empty());
  EXPECT_EQ(d.stolen(), 0);
}

TEST(Dispatcher, KeepsDepthTasksOutAndStealsTheTailOfTheSlowestList) {
  Schedule plan;
  plan.tasks = {{0, 1}, {2, 3, 4, 5}};
  const std::vector<double> costs(6, 1.0);
  Dispatcher d(plan, costs, 2, true);
  EXPECT_EQ(d.refill(0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d.refill(1), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(d.refill(1).empty());  // holds two already
  d.finished(0, 0);
  // Worker 0's list is used up: it takes worker 1's last unsent task (1 + 1 < 2 + 2 left).
  EXPECT_EQ(d.refill(0), (std::vector<int64_t>{5}));
  EXPECT_EQ(d.stolen(), 1);
  d.finished(1, 2);
  EXPECT_EQ(d.refill(1), (std::vector<int64_t>{4}));
  EXPECT_TRUE(d.all_sent());
  // Nothing left to hand out, and finishing what a worker does not hold is refused.
  d.finished(0, 1);
  EXPECT_TRUE(d.refill(0).empty());
  EXPECT_THROW(d.finished(0, 3), Error);
  EXPECT_THROW(d.refill(2), Error);
  EXPECT_THROW(Dispatcher(plan, costs, 0, true), Error);
}

TEST(Dispatcher, DoesNotStealWhatTheOwnerFinishesFirst) {
  // Worker 1 holds nothing long; its one unsent task would finish later on worker 0, which
  // still holds a long one.
  Schedule plan;
  plan.tasks = {{0}, {1, 2}};
  const std::vector<double> costs{10, 1, 1};
  Dispatcher d(plan, costs, 1, true);
  EXPECT_EQ(d.refill(0), (std::vector<int64_t>{0}));
  EXPECT_EQ(d.refill(1), (std::vector<int64_t>{1}));
  d.finished(0, 0);
  EXPECT_EQ(d.refill(0), (std::vector<int64_t>{2}));  // 0 + 1 < 1 + 1: worker 0, idle, takes 2
  EXPECT_EQ(d.stolen(), 1);
  Dispatcher busy(plan, costs, 2, true);
  busy.refill(0);
  // Worker 0 still holds the 10-cost task: taking task 2 (1 + 1 left on worker 1) would
  // finish it later, so it stays.
  EXPECT_TRUE(busy.refill(0).empty());
  EXPECT_EQ(busy.refill(1), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(busy.stolen(), 0);
}

TEST(Simulate, RebalancingRecoversFromAWrongPlan) {
  // Planned as equal, but the even segments take four times as long: round-robin puts all
  // the slow ones on worker 0. Static, worker 0 takes 4 x 4 = 16 s against 4 s; rebalanced,
  // worker 1 takes over from the tail of worker 0's list.
  std::vector<SimSegment> segments;
  for (int i = 0; i < 8; ++i) segments.push_back({i % 2 == 0 ? 4.0 : 1.0, 0, 0});
  SimConfig config;
  config.workers = 2;
  config.policy = Policy::kRoundRobin;
  config.link = free_link();
  config.planned_cost.assign(8, 1.0);
  const SimResult fixed = simulate(segments, config);
  EXPECT_DOUBLE_EQ(fixed.ttft_s, 16.0);
  EXPECT_EQ(fixed.stolen, 0);
  config.rebalance = true;
  const SimResult moved = simulate(segments, config);
  EXPECT_GT(moved.stolen, 0);
  // Worker 1 takes segment 6 at t = 3, when it has sent 1, 3 and 5 and holds 7; worker 0
  // then runs 0, 2, 4 (12 s).
  EXPECT_DOUBLE_EQ(moved.ttft_s, 12.0);
  for (size_t i = 0; i < segments.size(); ++i) EXPECT_GT(moved.arrival_s[i], 0.0) << i;
  EXPECT_DOUBLE_EQ(moved.busy_s[0] + moved.busy_s[1], 20.0);  // every segment once
  // With a true plan there is nothing to gain, and rebalancing does not make it worse.
  config.planned_cost.clear();
  config.policy = Policy::kLpt;
  config.rebalance = false;
  const double lpt = simulate(segments, config).ttft_s;
  config.rebalance = true;
  EXPECT_LE(simulate(segments, config).ttft_s, lpt);
}

// ---- message formats ---------------------------------------------------------------------

bool same_bits(const Tensor& a, const Tensor& b) {
  // An empty tensor has no data pointer: memcmp must not see it (UBSan: null argument).
  return a.shape() == b.shape() &&
         (a.bytes() == 0 || std::memcmp(a.data(), b.data(), a.bytes()) == 0);
}

store::Entry sample_entry() {
  store::Entry e;
  e.n_tokens = 77;
  Tensor t({2, 3, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = 0.5f * float(i) - 3.0f;
  t[0] = -0.0f;
  t[1] = std::numeric_limits<float>::denorm_min();
  t[2] = std::numeric_limits<float>::infinity();
  uint32_t nan_bits = 0x7fc01234;  // a NaN with a payload: must arrive bit for bit
  std::memcpy(&t[3], &nan_bits, 4);
  e.arrays["linear/0/T"] = t;
  e.arrays["linear/0/conv"] = Tensor({3, 1}, 1.25f);
  e.arrays["attn/3/K"] = Tensor(std::vector<int64_t>{0, 8});  // empty array
  e.arrays["scalar"] = Tensor(std::vector<int64_t>{}, 9.0f);  // rank 0: one value
  return e;
}

TEST(Messages, EntrySerialisationRoundTripsBitExact) {
  const store::Entry e = sample_entry();
  const Bytes bytes = serialize_entry(42, "00112233445566778899aabbccddeeff", e);
  const EntryMessage m = deserialize_entry(bytes.data(), bytes.size());
  EXPECT_EQ(m.segment, 42);
  EXPECT_EQ(m.key, "00112233445566778899aabbccddeeff");
  EXPECT_EQ(m.entry.n_tokens, 77);
  ASSERT_EQ(m.entry.arrays.size(), e.arrays.size());
  for (const auto& [name, tensor] : e.arrays) {
    EXPECT_TRUE(same_bits(m.entry.at(name), tensor)) << name;
  }
  // Serialising again gives the same bytes.
  EXPECT_EQ(serialize_entry(m.segment, m.key, m.entry), bytes);

  // Every truncation is refused with a clear error, never read past the end.
  for (size_t cut = 0; cut < bytes.size(); cut += 7) {
    EXPECT_THROW(deserialize_entry(bytes.data(), cut), Error) << cut;
  }
  Bytes longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(deserialize_entry(longer.data(), longer.size()), Error);
  Bytes foreign = bytes;
  foreign[0] ^= 0xff;
  EXPECT_THROW(deserialize_entry(foreign.data(), foreign.size()), Error);
}

TEST(Messages, CommandsAndFailureReportsRoundTrip) {
  Task task{12, "abc", {1, -2, 300000, 0}, 3};
  const Bytes tb = serialize_command(task);
  const Command back = deserialize_command(tb.data(), tb.size());
  ASSERT_TRUE(std::holds_alternative<Task>(back));
  EXPECT_EQ(std::get<Task>(back).segment, 12);
  EXPECT_EQ(std::get<Task>(back).key, "abc");
  EXPECT_EQ(std::get<Task>(back).tokens, task.tokens);
  EXPECT_EQ(std::get<Task>(back).junction, 3);
  EXPECT_FALSE(std::get<Task>(back).read_stored);
  Task read = task;
  read.read_stored = true;
  const Bytes rb = serialize_command(read);
  EXPECT_TRUE(std::get<Task>(deserialize_command(rb.data(), rb.size())).read_stored);
  Bytes bad_flag = rb;
  bad_flag.back() = 2;
  EXPECT_THROW(deserialize_command(bad_flag.data(), bad_flag.size()), Error);
  const Bytes sb = serialize_command(Shutdown{});
  EXPECT_TRUE(std::holds_alternative<Shutdown>(deserialize_command(sb.data(), sb.size())));
  EXPECT_THROW(deserialize_command(tb.data(), tb.size() - 1), Error);

  FailureReport report{3, 17, "deadbeef", "out of memory while computing layer 5"};
  const Bytes fb = serialize_failure(report);
  const FailureReport r = deserialize_failure(fb.data(), fb.size());
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.segment, 17);
  EXPECT_EQ(describe_failure(r),
            "rank 3 failed on segment 17 (key deadbeef): out of memory while computing layer 5");
  report.what = std::string(10000, 'x');
  const Bytes big = serialize_failure(report);
  EXPECT_LE(big.size(), kMaxFailureBytes);
  const std::string cut = deserialize_failure(big.data(), big.size()).what;
  EXPECT_EQ(cut.substr(cut.size() - 4), "x...");
  EXPECT_GT(cut.size(), 3000u);
}

TEST(Messages, PromptOrderBufferReleasesInOrder) {
  PromptOrderBuffer buffer({0, 2, 5, 7});
  auto received = [](int64_t segment) {
    ReceivedEntry r;
    r.segment = segment;
    r.source = 1;
    return r;
  };
  buffer.put(received(5));
  buffer.put(received(2));
  EXPECT_FALSE(buffer.next_ready());
  EXPECT_THROW(buffer.pop_next(), Error);
  buffer.put(received(0));
  std::vector<int64_t> order;
  while (buffer.next_ready()) order.push_back(buffer.pop_next().segment);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_FALSE(buffer.done());
  EXPECT_THROW(buffer.put(received(3)), Error);  // not asked for
  EXPECT_THROW(buffer.put(received(2)), Error);  // already released
  buffer.put(received(7));
  EXPECT_EQ(buffer.pop_next().segment, 7);
  EXPECT_TRUE(buffer.done());
  EXPECT_THROW(PromptOrderBuffer({1, 1}), Error);
}

// ---- progress ----------------------------------------------------------------------------

TEST(Progress, RateEtaAndPrintingCadence) {
  Progress p(10, 1000, 100.0);
  EXPECT_EQ(p.snapshot(100.0).eta_s, -1.0);  // no rate yet
  EXPECT_TRUE(p.due(100.0, 5.0));
  p.add(2, 250);
  const ProgressSnapshot s = p.snapshot(110.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 25.0);
  EXPECT_DOUBLE_EQ(s.eta_s, 30.0);  // 750 tokens left at 25 tokens/s
  EXPECT_EQ(p.line(110.0), "entries 2/10 (20.0 %), tokens 250/1000, 25 tokens/s, ETA 30s");
  EXPECT_FALSE(p.due(103.0, 5.0));
  EXPECT_TRUE(p.due(105.0, 5.0));
  p.add(8, 750);
  EXPECT_TRUE(p.due(105.5, 5.0));   // finished: the final line at once
  EXPECT_FALSE(p.due(200.0, 5.0));  // and only once
  EXPECT_DOUBLE_EQ(p.snapshot(120.0).eta_s, 0.0);
  EXPECT_EQ(format_duration(75), "1m15s");
  EXPECT_EQ(format_duration(3725), "1h02m05s");
  EXPECT_EQ(format_duration(-1), "?");
}

// ---- world-size checks -------------------------------------------------------------------

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(World, CheckWorldSizeAgainstRequestAndLauncher) {
  const EnvLookup none = fake_env({});
  EXPECT_NO_THROW(check_world_size(4, 4, none));
  EXPECT_NO_THROW(check_world_size(0, 1, none));  // nothing asked, no launcher: fine
  EXPECT_NO_THROW(check_world_size(0, 3, fake_env({{"OMPI_COMM_WORLD_SIZE", "3"}})));

  const std::string asked = error_of([&] { check_world_size(4, 2, none); });
  EXPECT_NE(asked.find("asked for 4 ranks"), std::string::npos) << asked;
  EXPECT_NE(asked.find("has 2"), std::string::npos) << asked;

  // The wrong-launcher case: each process is a one-rank MPI job.
  for (const char* var : {"SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    const std::string split = error_of([&] { check_world_size(0, 1, fake_env({{var, "4"}})); });
    EXPECT_NE(split.find("did not join one MPI job"), std::string::npos) << split;
    EXPECT_NE(split.find(std::string(var) + "=4"), std::string::npos) << split;
    const std::string split_asked = error_of([&] {
      check_world_size(4, 1, fake_env({{var, "4"}}));
    });
    EXPECT_NE(split_asked.find("did not join one MPI job"), std::string::npos) << split_asked;
  }
  // Launcher and MPI disagree without --ranks.
  const std::string mismatch = error_of([&] {
    check_world_size(0, 2, fake_env({{"SLURM_NTASKS", "4"}}));
  });
  EXPECT_NE(mismatch.find("SLURM_NTASKS=4"), std::string::npos) << mismatch;
  // An explicit --ranks wins over the allocation's size (mpirun -n 2 in a 4-task allocation).
  EXPECT_NO_THROW(check_world_size(2, 2, fake_env({{"SLURM_NTASKS", "4"}})));
  EXPECT_NO_THROW(check_world_size(1, 1, fake_env({{"SLURM_NTASKS", "4"}})));
  // mpirun's own count comes before Slurm's.
  EXPECT_NO_THROW(
      check_world_size(0, 2, fake_env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_NTASKS", "4"}})));
  // Garbage is ignored.
  EXPECT_NO_THROW(check_world_size(0, 1, fake_env({{"SLURM_NTASKS", "four"}})));
  const auto launched = launcher_world_size(fake_env({{"PMI_SIZE", "8"}, {"SLURM_NTASKS", "2"}}));
  ASSERT_TRUE(launched.has_value());
  EXPECT_EQ(launched->size, 8);
  EXPECT_EQ(launched->variable, "PMI_SIZE");
}

TEST(World, BlasThreadsPerRank) {
  EXPECT_EQ(blas_threads_per_rank(16, 4, 16), 4);  // unbound: an even share
  EXPECT_EQ(blas_threads_per_rank(16, 4, 1), 1);   // bound to one core each
  EXPECT_EQ(blas_threads_per_rank(2, 3, 2), 1);    // oversubscribed: never 0
  EXPECT_EQ(blas_threads_per_rank(2, 1, 2), 2);
  EXPECT_EQ(blas_threads_per_rank(0, 0, 0), 1);

  const WorldInfo info = describe_world(MPI_COMM_WORLD);
  EXPECT_GE(info.size, 1);
  EXPECT_LT(info.local_rank, info.local_size);
  EXPECT_FALSE(info.processor_name.empty());
  EXPECT_GE(info.node_cpus, info.own_cpus);
  EXPECT_GE(blas_threads_per_rank(info), 1);
}

TEST(World, CommunicatorOwnership) {
  Communicator world = Communicator::world();
  EXPECT_FALSE(world.owned());
  Communicator copy = world.duplicate();
  EXPECT_TRUE(copy.owned());
  EXPECT_EQ(copy.size(), world.size());
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(copy.get(), world.get(), &result);
  EXPECT_EQ(result, MPI_CONGRUENT);
  Communicator moved = std::move(copy);
  EXPECT_FALSE(copy.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(moved.valid());
  Communicator node = world.split_shared();
  EXPECT_LE(node.size(), world.size());
}

// ---- the worker watch's pieces -----------------------------------------------------------

TEST(WorkerWatch, IdentityRoundTripsAndRefusesForeignBytes) {
  const ProcessIdentity me = this_process(MPI_COMM_SELF);
  EXPECT_EQ(me.rank, 0);
  EXPECT_EQ(me.pid, static_cast<int64_t>(getpid()));
  EXPECT_FALSE(me.host.empty());
  EXPECT_EQ(me.pid_namespace.rfind("pid:[", 0), 0u) << me.pid_namespace;
  const std::vector<uint8_t> bytes = serialize_identity(me);
  const ProcessIdentity back = deserialize_identity(bytes.data(), bytes.size());
  EXPECT_EQ(back.rank, me.rank);
  EXPECT_EQ(back.pid, me.pid);
  EXPECT_EQ(back.host, me.host);
  EXPECT_EQ(back.pid_namespace, me.pid_namespace);
  EXPECT_EQ(back.lifeline_port, 0);
  ProcessIdentity worker = me;
  worker.lifeline_port = 40713;
  const std::vector<uint8_t> wb = serialize_identity(worker);
  EXPECT_EQ(deserialize_identity(wb.data(), wb.size()).lifeline_port, 40713);
  EXPECT_THROW(deserialize_identity(bytes.data(), bytes.size() - 1), Error);
  std::vector<uint8_t> foreign = bytes;
  foreign[0] ^= 0xff;
  EXPECT_THROW(deserialize_identity(foreign.data(), foreign.size()), Error);
}

TEST(WorkerWatch, ProcessGoneSeesZombiesAndReapedProcesses) {
  EXPECT_FALSE(process_gone(static_cast<int64_t>(getpid())));
  EXPECT_FALSE(process_gone(0));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Not yet collected: a zombie, which kill(pid, 0) still reaches.
  bool zombie = false;
  for (int i = 0; i < 500 && !zombie; ++i) {
    zombie = process_gone(child);
    if (!zombie) usleep(2000);
  }
  EXPECT_TRUE(zombie);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(process_gone(child));
}

// ---- lifelines (cluster/lifeline.hpp) ---------------------------------------------------

// Polls `line` for at most 5 s until it leaves `from`.
LifelineState poll_until_not(Lifeline& line, LifelineState from) {
  for (int i = 0; i < 500 && line.poll() == from; ++i) usleep(10000);
  return line.state();
}

TEST(Lifeline, ConnectsWithKeepAliveAndSeesTheListenerClose) {
  const uint16_t port = lifeline_port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(lifeline_port(), port) << "one listener per process";
  Lifeline line("localhost", port, KeepAlive{3, 2, 4});
  EXPECT_EQ(poll_until_not(line, LifelineState::kConnecting), LifelineState::kAlive)
      << line.problem();
  ASSERT_GE(line.fd(), 0);
  int idle = 0, interval = 0, count = 0, keep = 0;
  socklen_t len = sizeof(int);
  ASSERT_EQ(getsockopt(line.fd(), SOL_SOCKET, SO_KEEPALIVE, &keep, &len), 0);
  ASSERT_EQ(getsockopt(line.fd(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len), 0);
  ASSERT_EQ(getsockopt(line.fd(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, &len), 0);
  ASSERT_EQ(getsockopt(line.fd(), IPPROTO_TCP, TCP_KEEPCNT, &count, &len), 0);
  EXPECT_NE(keep, 0);
  EXPECT_EQ(idle, 3);
  EXPECT_EQ(interval, 2);
  EXPECT_EQ(count, 4);
  // Nobody accepts it, nothing is sent: it stays alive.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(line.poll(), LifelineState::kAlive);
    EXPECT_FALSE(lifeline_broken(line.fd()));
    usleep(5000);
  }
  // The worker's death as its kernel sees it: the listener closes, the connection is reset.
  close_lifeline_listener();
  EXPECT_EQ(poll_until_not(line, LifelineState::kAlive), LifelineState::kClosed);
  EXPECT_NE(line.problem().find("localhost (127.0.0.1:" + std::to_string(port) + ")"),
            std::string::npos)
      << line.problem();
  EXPECT_TRUE(lifeline_broken(line.fd()));
  EXPECT_FALSE(lifeline_broken(-1));
  EXPECT_NE(lifeline_port(), 0) << "a new listener after the old one closed";
}

TEST(Lifeline, SeesAProcessKilledWithSigkill) {
  int ports[2];
  ASSERT_EQ(pipe(ports), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close_lifeline_listener();  // the child's own listener, not the parent's copy
    const uint16_t port = lifeline_port();
    (void)!write(ports[1], &port, sizeof port);
    pause();
    _exit(0);
  }
  uint16_t port = 0;
  ASSERT_EQ(read(ports[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  close(ports[0]);
  close(ports[1]);
  Lifeline line("127.0.0.1", port);
  EXPECT_EQ(poll_until_not(line, LifelineState::kConnecting), LifelineState::kAlive)
      << line.problem();
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(poll_until_not(line, LifelineState::kAlive), LifelineState::kClosed) << line.problem();
}

TEST(Lifeline, UnresolvedHostOrNoListenerLeavesItUnavailableNotDead) {
  Lifeline nobody("no-such-host.invalid", 4000);
  EXPECT_EQ(nobody.poll(), LifelineState::kUnavailable);
  EXPECT_NE(nobody.problem().find("cannot resolve host 'no-such-host.invalid'"), std::string::npos)
      << nobody.problem();
  Lifeline no_port("localhost", 0);
  EXPECT_EQ(no_port.poll(), LifelineState::kUnavailable);
  // A port nothing listens on: refused, which a firewall can do as well, so not a death.
  const uint16_t port = lifeline_port();
  close_lifeline_listener();
  Lifeline refused("127.0.0.1", port);
  EXPECT_EQ(poll_until_not(refused, LifelineState::kConnecting), LifelineState::kUnavailable);
  EXPECT_NE(refused.problem().find("connect"), std::string::npos) << refused.problem();
  EXPECT_STREQ(lifeline_state_name(LifelineState::kLost), "lost");
}

}  // namespace cluster_test
}  // namespace
}  // namespace hypic::cluster
