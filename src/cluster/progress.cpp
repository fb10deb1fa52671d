#include "cluster/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "hypic/error.hpp"

namespace hypic::cluster {

Progress::Progress(int64_t entries_total, int64_t tokens_total, double start_s)
    : entries_total_(entries_total), tokens_total_(tokens_total), start_s_(start_s) {
  HYPIC_REQUIRE(entries_total >= 0 && tokens_total >= 0, "progress totals must be >= 0");
}

void Progress::add(int64_t entries, int64_t tokens) {
  entries_done_ += entries;
  tokens_done_ += tokens;
}

ProgressSnapshot Progress::snapshot(double now_s) const {
  ProgressSnapshot s;
  s.entries_done = entries_done_;
  s.entries_total = entries_total_;
  s.tokens_done = tokens_done_;
  s.tokens_total = tokens_total_;
  s.elapsed_s = std::max(0.0, now_s - start_s_);
  if (tokens_done_ > 0 && s.elapsed_s > 0.0) {
    s.tokens_per_s = static_cast<double>(tokens_done_) / s.elapsed_s;
    const double left = static_cast<double>(std::max<int64_t>(0, tokens_total_ - tokens_done_));
    s.eta_s = left / s.tokens_per_s;
  } else if (tokens_done_ >= tokens_total_ && entries_done_ >= entries_total_) {
    s.eta_s = 0.0;
  }
  return s;
}

std::string Progress::line(double now_s) const {
  const ProgressSnapshot s = snapshot(now_s);
  const double percent =
      s.entries_total > 0 ? 100.0 * static_cast<double>(s.entries_done) / s.entries_total : 100.0;
  char rate[32];
  if (s.tokens_per_s >= 1e3) {
    std::snprintf(rate, sizeof(rate), "%.1fk", s.tokens_per_s / 1e3);
  } else {
    std::snprintf(rate, sizeof(rate), "%.0f", s.tokens_per_s);
  }
  char text[256];
  std::snprintf(text, sizeof(text),
                "entries %lld/%lld (%.1f %%), tokens %lld/%lld, %s tokens/s, ETA %s",
                static_cast<long long>(s.entries_done), static_cast<long long>(s.entries_total),
                percent, static_cast<long long>(s.tokens_done),
                static_cast<long long>(s.tokens_total), rate, format_duration(s.eta_s).c_str());
  return text;
}

bool Progress::due(double now_s, double interval_s) {
  if (entries_done_ >= entries_total_) {  // the final line, once
    if (final_reported_) return false;
    final_reported_ = true;
    last_report_s_ = now_s;
    return true;
  }
  if (last_report_s_ >= 0.0 && now_s - last_report_s_ < interval_s) return false;
  last_report_s_ = now_s;
  return true;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  const long long total = std::llround(seconds);
  const long long h = total / 3600;
  const long long m = (total % 3600) / 60;
  const long long s = total % 60;
  char text[48];
  if (h > 0) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm%02llds", h, m, s);
  } else if (m > 0) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", m, s);
  } else {
    std::snprintf(text, sizeof(text), "%llds", s);
  }
  return text;
}

}  // namespace hypic::cluster
