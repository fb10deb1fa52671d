#pragma once
// Timing helpers shared by the benchmarks: a steady clock, medians, a timed-repetition loop.
#include <chrono>
#include <vector>

namespace hypic::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median of the values (the mean of the two middle ones for an even count); 0 when empty.
double median(std::vector<double> values);
// The middle value, or the upper of the two middle ones for an even count; 0 when empty.
double upper_median(std::vector<double> values);

// Seconds of `reps` timed calls of `run` (reps > 0), after one untimed warm-up call: the
// middle one, or the upper of the two middle ones for an even count.
template <typename F>
double median_seconds(int reps, F&& run) {
  run();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    run();
    t.push_back(seconds_since(t0));
  }
  return upper_median(std::move(t));
}

}  // namespace hypic::bench
