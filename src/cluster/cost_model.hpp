#pragma once
// The time to compute one segment entry as a function of its token count,
//   t(n) = a + b·n + c·n²,
// a per-segment overhead, the per-token work (projections, MLP, linear-attention chunks) and
// the quadratic part (full-attention layers within the segment). The engine measures
// (tokens, seconds) samples on the hardware at hand; this file fits the model, predicts from
// it, and keeps it as JSON next to the store so that later runs schedule with it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic::cluster {

struct CostSample {
  int64_t tokens = 0;
  double seconds = 0.0;
};

class CostModel {
 public:
  CostModel() = default;
  CostModel(double a, double b, double c) : a_(a), b_(b), c_(c) {}

  // Least-squares fit with a, b, c >= 0 (a cost never falls with more tokens; unconstrained
  // least squares can make a or c negative on noisy samples and predict negative times for
  // short segments). Samples need tokens >= 0 and finite seconds >= 0; at least one sample.
  // With fewer than three distinct token counts the terms that cannot be told apart are left
  // out: one count fits t = b·n (or t = a when n = 0), two counts fit a + b·n.
  static CostModel fit(const std::vector<CostSample>& samples);

  double predict(int64_t tokens) const;
  std::vector<double> predict(const std::vector<int64_t>& tokens) const;

  double a() const { return a_; }
  double b() const { return b_; }
  double c() const { return c_; }
  // Root-mean-square residual of the fit, in seconds, and the token range it was fitted on
  // (0 for a model built from coefficients).
  double rms_residual() const { return rms_residual_; }
  int64_t samples() const { return samples_; }
  int64_t min_tokens() const { return min_tokens_; }
  int64_t max_tokens() const { return max_tokens_; }

  // Where the samples came from (model fingerprint, preset, host): kept in the JSON only.
  std::string provenance;

  // {"format": "hypic-cost-model", "version": 1, "form": "a + b*n + c*n^2", "a", "b", "c",
  //  "samples", "min_tokens", "max_tokens", "rms_residual_s", "provenance"}
  nlohmann::json to_json() const;
  // Throws hypic::Error on a wrong format, version or a missing/negative coefficient.
  static CostModel from_json(const nlohmann::json& j);
  // Written to PATH.tmp and renamed over PATH, so a reader never sees half a file.
  void save(const std::string& path) const;
  static CostModel load(const std::string& path);

 private:
  double a_ = 0.0;
  double b_ = 0.0;
  double c_ = 0.0;
  double rms_residual_ = 0.0;
  int64_t samples_ = 0;
  int64_t min_tokens_ = 0;
  int64_t max_tokens_ = 0;
};

}  // namespace hypic::cluster
