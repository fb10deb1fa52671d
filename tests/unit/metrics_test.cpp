// Answer metrics against golden values from the Python references
// (scripts/golden/make_metrics_golden.py: SQuAD v1.1 normalisation, the rouge-score package).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "eval/metrics.hpp"
#include "hypic/error.hpp"
#include "model/unicode.hpp"

namespace {
namespace metrics_test {

using nlohmann::json;
namespace ev = hypic::eval;

const json& golden() {
  static const json g = [] {
    std::ifstream in(std::string(HYPIC_TEST_DATA_DIR) + "/metrics/golden.json");
    std::ostringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }();
  return g;
}

constexpr double kTol = 1e-6;

TEST(Metrics, SquadNormalisationMatchesPython) {
  for (const auto& c : golden()["cases"])
    EXPECT_EQ(ev::normalize_answer(c["prediction"].get<std::string>()),
              c["normalized_prediction"].get<std::string>())
        << c["prediction"];
}

TEST(Metrics, ExactMatchAndF1MatchSquadReference) {
  int n = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string pred = c["prediction"];
    const auto golds = c["answers"].get<std::vector<std::string>>();
    EXPECT_NEAR(ev::max_exact_match(pred, golds), c["exact_match"].get<double>(), kTol) << pred;
    EXPECT_NEAR(ev::max_token_f1(pred, golds), c["f1"].get<double>(), kTol) << pred;
    EXPECT_NEAR(ev::score("qa_f1", pred, golds), c["f1"].get<double>(), kTol) << pred;
    ++n;
  }
  EXPECT_GE(n, 40);
}

TEST(Metrics, RougeLMatchesRougeScorePackage) {
  for (const auto& c : golden()["cases"]) {
    const std::string pred = c["prediction"];
    const auto golds = c["answers"].get<std::vector<std::string>>();
    EXPECT_EQ(ev::rouge_tokenize(pred),
              c["rouge_tokens_prediction"].get<std::vector<std::string>>())
        << pred;
    for (size_t i = 0; i < golds.size(); ++i) {
      const auto r = ev::rouge_l(golds[i], pred);
      const auto& want = c["rouge_l"][i];
      EXPECT_NEAR(r.precision, want["precision"].get<double>(), kTol) << pred;
      EXPECT_NEAR(r.recall, want["recall"].get<double>(), kTol) << pred;
      EXPECT_NEAR(r.fmeasure, want["fmeasure"].get<double>(), kTol) << pred;
    }
    EXPECT_NEAR(ev::max_rouge_l(pred, golds), c["rouge_l_max"].get<double>(), kTol) << pred;
    EXPECT_NEAR(ev::score("rouge_l", pred, golds), c["rouge_l_max"].get<double>(), kTol) << pred;
  }
}

TEST(Metrics, EdgeCases) {
  EXPECT_EQ(ev::max_token_f1("anything", {}), 0.0);
  EXPECT_EQ(ev::first_line("\n\nParis\nbecause..."), "Paris");
  EXPECT_EQ(ev::first_line("\n\n"), "");
  EXPECT_THROW(ev::score("bleu", "a", {"a"}), hypic::Error);
  // Invalid UTF-8 in a prediction is scored as U+FFFD, not thrown on.
  EXPECT_NEAR(ev::token_f1("Paris\xFF", "paris"), 0.0, kTol);
  EXPECT_EQ(hypic::unicode::python_lower("ΑΣ Σ"), "ας σ");
}

}  // namespace metrics_test
}  // namespace
