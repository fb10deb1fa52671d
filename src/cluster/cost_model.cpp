#include "cluster/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "common/files.hpp"
#include "hypic/error.hpp"

namespace hypic::cluster {

namespace {

constexpr const char* kFormat = "hypic-cost-model";
constexpr int kVersion = 1;

// Solves the least-squares problem for the basis terms in `terms` (0: 1, 1: x, 2: x²) by the
// normal equations with partial pivoting; x is scaled to [0, 1], which keeps the 3×3 system
// well conditioned. nullopt when the chosen columns are linearly dependent on these samples.
std::optional<std::array<double, 3>> solve_subset(const std::vector<double>& x,
                                                  const std::vector<double>& y,
                                                  const std::vector<int>& terms) {
  const size_t p = terms.size();
  auto basis = [&](size_t i, int term) { return std::pow(x[i], term); };
  std::array<std::array<double, 4>, 3> m{};  // augmented normal matrix [XᵀX | Xᵀy]
  for (size_t i = 0; i < x.size(); ++i) {
    for (size_t r = 0; r < p; ++r) {
      const double br = basis(i, terms[r]);
      for (size_t c = 0; c < p; ++c) m[r][c] += br * basis(i, terms[c]);
      m[r][3] += br * y[i];
    }
  }
  double scale = 0.0;
  for (size_t r = 0; r < p; ++r) scale = std::max(scale, std::fabs(m[r][r]));
  for (size_t col = 0; col < p; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < p; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    if (std::fabs(m[pivot][col]) <= 1e-12 * scale) return std::nullopt;
    std::swap(m[pivot], m[col]);
    for (size_t r = 0; r < p; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (size_t c = col; c < p; ++c) m[r][c] -= f * m[col][c];
      m[r][3] -= f * m[col][3];
    }
  }
  std::array<double, 3> coef{0.0, 0.0, 0.0};
  for (size_t r = 0; r < p; ++r) coef[static_cast<size_t>(terms[r])] = m[r][3] / m[r][r];
  return coef;
}

}  // namespace

CostModel CostModel::fit(const std::vector<CostSample>& samples) {
  HYPIC_REQUIRE(!samples.empty(), "cannot fit a cost model without samples; measure some segments");
  std::set<int64_t> distinct;
  int64_t max_tokens = 0;
  int64_t min_tokens = std::numeric_limits<int64_t>::max();
  for (const CostSample& s : samples) {
    HYPIC_REQUIRE(s.tokens >= 0 && std::isfinite(s.seconds) && s.seconds >= 0.0,
                  "cost sample (" + std::to_string(s.tokens) + " tokens, " +
                      std::to_string(s.seconds) +
                      " s) is invalid: tokens and seconds must be >= 0");
    distinct.insert(s.tokens);
    max_tokens = std::max(max_tokens, s.tokens);
    min_tokens = std::min(min_tokens, s.tokens);
  }
  const double scale = max_tokens > 0 ? static_cast<double>(max_tokens) : 1.0;
  std::vector<double> x;
  std::vector<double> y;
  for (const CostSample& s : samples) {
    x.push_back(static_cast<double>(s.tokens) / scale);
    y.push_back(s.seconds);
  }

  // Which terms may enter: those the distinct token counts can tell apart.
  std::vector<std::vector<int>> candidates;
  if (distinct.size() >= 3) {
    candidates = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  } else if (distinct.size() == 2) {
    candidates = {{0}, {1}, {0, 1}};
  } else if (max_tokens > 0) {
    candidates = {{1}};
  } else {
    candidates = {{0}};
  }

  // Non-negative least squares by enumeration: the constrained optimum is the unconstrained
  // optimum on its own support, so the best feasible subset solution is the answer.
  std::optional<std::array<double, 3>> best;
  double best_ssr = std::numeric_limits<double>::infinity();
  for (const std::vector<int>& terms : candidates) {
    const std::optional<std::array<double, 3>> coef = solve_subset(x, y, terms);
    if (!coef) continue;
    if ((*coef)[0] < 0.0 || (*coef)[1] < 0.0 || (*coef)[2] < 0.0) continue;
    double ssr = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double r = (*coef)[0] + (*coef)[1] * x[i] + (*coef)[2] * x[i] * x[i] - y[i];
      ssr += r * r;
    }
    // Strictly better only: among equal fits the simpler model (listed first) stays.
    if (ssr < best_ssr * (1.0 - 1e-12) || !best) {
      best = coef;
      best_ssr = ssr;
    }
  }
  HYPIC_REQUIRE(best.has_value(), "cost model fit failed: no non-negative solution");

  CostModel model((*best)[0], (*best)[1] / scale, (*best)[2] / (scale * scale));
  model.samples_ = static_cast<int64_t>(samples.size());
  model.min_tokens_ = min_tokens;
  model.max_tokens_ = max_tokens;
  model.rms_residual_ = std::sqrt(best_ssr / static_cast<double>(samples.size()));
  return model;
}

double CostModel::predict(int64_t tokens) const {
  const double n = static_cast<double>(tokens);
  return a_ + b_ * n + c_ * n * n;
}

std::vector<double> CostModel::predict(const std::vector<int64_t>& tokens) const {
  std::vector<double> out;
  out.reserve(tokens.size());
  for (int64_t n : tokens) out.push_back(predict(n));
  return out;
}

nlohmann::json CostModel::to_json() const {
  return {{"format", kFormat},
          {"version", kVersion},
          {"form", "a + b*n + c*n^2 seconds, n = tokens in the segment"},
          {"a", a_},
          {"b", b_},
          {"c", c_},
          {"samples", samples_},
          {"min_tokens", min_tokens_},
          {"max_tokens", max_tokens_},
          {"rms_residual_s", rms_residual_},
          {"provenance", provenance}};
}

CostModel CostModel::from_json(const nlohmann::json& j) {
  HYPIC_REQUIRE(j.is_object() && j.value("format", std::string()) == kFormat,
                "not a hypic cost model (expected \"format\": \"" + std::string(kFormat) + "\")");
  HYPIC_REQUIRE(j.value("version", 0) == kVersion,
                "cost model version " + j.value("version", nlohmann::json()).dump() +
                    " is not supported (expected " + std::to_string(kVersion) +
                    "); measure it again with this hypic");
  auto coefficient = [&](const char* name) {
    HYPIC_REQUIRE(j.contains(name) && j[name].is_number(),
                  std::string("cost model lacks the number \"") + name + "\"");
    const double v = j[name].get<double>();
    HYPIC_REQUIRE(std::isfinite(v) && v >= 0.0, std::string("cost model coefficient ") + name +
                                                    " = " + std::to_string(v) +
                                                    " must be finite and >= 0");
    return v;
  };
  CostModel model(coefficient("a"), coefficient("b"), coefficient("c"));
  model.samples_ = j.value("samples", int64_t{0});
  model.min_tokens_ = j.value("min_tokens", int64_t{0});
  model.max_tokens_ = j.value("max_tokens", int64_t{0});
  model.rms_residual_ = j.value("rms_residual_s", 0.0);
  model.provenance = j.value("provenance", std::string());
  return model;
}

void CostModel::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    HYPIC_REQUIRE(out.good(), "cannot write cost model to " + tmp + ": check the directory exists");
    out << to_json().dump(2) << "\n";
    out.flush();
    HYPIC_REQUIRE(out.good(), "writing cost model " + tmp + " failed (disk full?)");
  }
  HYPIC_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0,
                "cannot rename " + tmp + " to " + path + ": check permissions");
}

CostModel CostModel::load(const std::string& path) {
  HYPIC_REQUIRE(std::ifstream(path).good(),
                "cannot read cost model " + path + ": run `hypic warmup` to measure one");
  const std::string text = read_regular_file(path, "cost model");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("cost model " + path + " is not valid JSON: " + e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace hypic::cluster
