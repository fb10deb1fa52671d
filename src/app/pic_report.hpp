#pragma once
// What `hypic serve` and `hypic bench ttft` report about a batch of queries: per-query
// prediction lines, fidelity against full recompute, and the batch summary
// (metrics.json, timings.csv, one printed line).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pic/engine.hpp"

namespace hypic::app {

struct Fidelity {
  double agreement = 1.0;  // greedy tokens equal before the first divergence, share of full's
  bool exact = true;
  double kl_first_token = 0.0;    // KL(full ‖ mode) of the first generated token's distribution
  double hidden_rel_error = 0.0;  // ‖h_mode − h_full‖ / ‖h_full‖, last prompt token
};
Fidelity compare(const pic::QueryResult& full, const pic::QueryResult& mode);
nlohmann::json fidelity_json(const Fidelity& f);

// id, answer_tokens, ttft_ms, segments, hits, cold, tokens_recomputed, ... (no text).
nlohmann::json prediction_json(const pic::QueryResult& r);

class RunSummary {
 public:
  RunSummary(pic::Mode mode, pic::JunctionSpec junction, size_t memory_budget_bytes);
  void add(const pic::QueryResult& r, const std::optional<Fidelity>& f,
           std::optional<double> f1 = std::nullopt);

  nlohmann::json metrics_json() const;
  std::string timings_csv() const;
  std::string one_line() const;
  std::vector<double> ttft_ms() const;

  std::string device = "cpu";  // where the forward pass ran (--device)
  // How entries went between ranks (cluster::EntryPath's name) and why.
  std::string entry_path = "in-process", entry_path_reason;
  int skipped_lines = 0;
  double wall_seconds = 0;
  size_t memory_bytes = 0;
  uint64_t memory_evictions = 0;

 private:
  pic::Mode mode_;
  pic::JunctionSpec junction_;
  size_t budget_;
  std::vector<pic::QueryResult> results_;  // without logits and hidden states
  std::vector<Fidelity> fidelity_;
  std::vector<double> f1_;
};

}  // namespace hypic::app
