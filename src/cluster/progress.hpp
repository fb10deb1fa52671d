#pragma once
// Job-wide progress on rank 0 for a warm-up: entries done, tokens per second, and an ETA
// from the tokens still to do (tokens, not entries, because segment lengths are skewed).
// Times are passed in (seconds on any monotonic clock), so the arithmetic is testable.
#include <cstdint>
#include <string>

namespace hypic::cluster {

struct ProgressSnapshot {
  int64_t entries_done = 0;
  int64_t entries_total = 0;
  int64_t tokens_done = 0;
  int64_t tokens_total = 0;
  double elapsed_s = 0.0;
  double tokens_per_s = 0.0;  // 0 until some tokens are done
  double eta_s = -1.0;        // -1 while unknown (no rate yet)
};

class Progress {
 public:
  Progress(int64_t entries_total, int64_t tokens_total, double start_s);
  void add(int64_t entries, int64_t tokens);
  ProgressSnapshot snapshot(double now_s) const;
  // "entries 120/1000 (12.0 %), tokens 61440/512000, 3.4k tokens/s, ETA 2m13s"
  std::string line(double now_s) const;
  // When to print: at most once per interval_s, and once more when all entries are done.
  bool due(double now_s, double interval_s);

 private:
  int64_t entries_total_;
  int64_t tokens_total_;
  double start_s_;
  int64_t entries_done_ = 0;
  int64_t tokens_done_ = 0;
  double last_report_s_ = -1.0;
  bool final_reported_ = false;
};

// 75 -> "1m15s", 3725 -> "1h02m05s", below a minute "42s"; negative -> "?".
std::string format_duration(double seconds);

}  // namespace hypic::cluster
