// The library side of `hypic eval` without the CLI, MPI or a model: prompts as queries
// (byte-level tokenizer: one token per byte), scores per mode, and the comparison table.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "eval/metrics.hpp"
#include "eval/runner.hpp"
#include "hypic/error.hpp"

namespace {
namespace eval_runner_test {
using hypic::eval::EvalItem;
using hypic::eval::Example;
using hypic::eval::ModeScorer;
using hypic::eval::PromptTemplate;
using hypic::pic::Mode;
using hypic::pic::QueryResult;

PromptTemplate qa_template() {
  PromptTemplate t;
  t.dataset = "toy";
  t.prefix = "P:";
  t.segment = "[{index}]{text}";
  t.suffix = "Q:{input}";
  t.metric = "qa_f1";
  return t;
}

Example example(const std::string& id, std::vector<std::string> segments,
                std::vector<std::string> answers) {
  Example ex;
  ex.id = id;
  ex.segments = std::move(segments);
  ex.question = "who?";
  ex.answers = std::move(answers);
  return ex;
}

TEST(EvalRunner, ItemsAreTheRenderedPromptsAndTooLongOnesAreNamed) {
  const auto tok = hypic::model::Tokenizer::byte_level();
  const PromptTemplate t = qa_template();
  const std::vector<Example> examples = {example("a", {"xy", "z"}, {"x"}), example("b", {}, {"x"}),
                                         example("c", {std::string(40, 'w')}, {"x"})};
  std::vector<std::string> skipped;
  // a: 2 + (3+2) + (3+1) + 6 + 4 answer tokens = 21 fit in 30; c needs 2 + 43 + 6 + 4.
  const std::vector<EvalItem> items = hypic::eval::make_items(examples, t, tok, 30, 4, skipped);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].query.id, "a");
  EXPECT_EQ(items[0].query.prefix.size(), 2u);
  ASSERT_EQ(items[0].query.segments.size(), 2u);
  EXPECT_EQ(items[0].query.segments[0].size(), 5u);  // "[1]xy"
  EXPECT_EQ(items[0].query.segments[1].size(), 4u);  // "[2]z"
  EXPECT_EQ(items[0].query.question.size(), 6u);     // "Q:who?"
  EXPECT_EQ(items[0].query.max_new_tokens, 4);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0], "b (no context segments)");
  EXPECT_EQ(skipped[1], "c (prompt and answer exceed the model's context)");
}

// A template with a header gives each passage two segments, header then passage, and the
// passage's tokens are the same at any position (one store entry).
TEST(EvalRunner, HeaderIsASegmentOfItsOwnAndThePassageIsTheSameAtAnyPosition) {
  const auto tok = hypic::model::Tokenizer::byte_level();
  PromptTemplate t = qa_template();
  t.header = "<{index}>";
  t.segment = "{text};";
  std::vector<std::string> skipped;
  const std::vector<EvalItem> items =
      hypic::eval::make_items({example("a", {"xy", "z"}, {"x"}), example("b", {"z", "xy"}, {"x"})},
                              t, tok, 100, 4, skipped);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(skipped.empty());
  const auto& a = items[0].query.segments;
  const auto& b = items[1].query.segments;
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(a[0], tok.encode("<1>", false));
  EXPECT_EQ(a[1], tok.encode("xy;", false));
  EXPECT_EQ(a[2], tok.encode("<2>", false));
  EXPECT_EQ(a[1], b[3]);  // "xy" at position 1 and at position 2
  EXPECT_EQ(a[3], b[1]);
  EXPECT_EQ(a[0], b[0]);
}

TEST(EvalRunner, ScorerWritesPredLinesAndTheTableComparesModes) {
  const PromptTemplate t = qa_template();
  EvalItem item{example("a", {"s"}, {"Paris"}), {}};
  QueryResult hit;
  hit.hits_memory = 1;
  hit.hits_store = 2;
  hit.segments = 3;
  hit.times.ttft = 0.010;
  QueryResult cold = hit;
  cold.hits_memory = cold.hits_store = 0;
  cold.cold = 3;
  cold.times.ttft = 0.030;

  ModeScorer full(Mode::Full, t), pic(Mode::Pic, t);
  const auto line = full.add(item, cold, "Paris");
  EXPECT_EQ(line["pred"], "Paris");
  EXPECT_EQ(line["_id"], "a");
  EXPECT_DOUBLE_EQ(line["score"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(line["em"].get<double>(), 1.0);
  EXPECT_EQ(line["colds"], 3);
  full.add(item, cold, "Paris");
  pic.add(item, hit, "Paris");
  pic.add(item, hit, "Rome");
  EXPECT_DOUBLE_EQ(pic.score(), 0.5);
  EXPECT_EQ(pic.hits_memory(), 2);
  EXPECT_EQ(pic.hits_store(), 4);

  const auto cmp = hypic::eval::compare_modes({full, pic}, {"f.jsonl", "p.jsonl"}, t.metric);
  EXPECT_NE(cmp.table.find("| mode | F1 | Δ vs full | EM |"), std::string::npos) << cmp.table;
  EXPECT_NE(cmp.table.find("| full | 100.00 | +0.00 | 100.00 | 30.0 | 30.0 | 0 (0+0) | 6 |"),
            std::string::npos)
      << cmp.table;
  EXPECT_NE(cmp.table.find("| pic | 50.00 | -50.00 | 50.00 | 10.0 | 10.0 | 6 (2+4) | 0 |"),
            std::string::npos)
      << cmp.table;
  ASSERT_EQ(cmp.modes.size(), 2u);
  EXPECT_DOUBLE_EQ(cmp.modes[1]["delta_vs_full"].get<double>(), -0.5);
  EXPECT_EQ(cmp.modes[1]["predictions"], "p.jsonl");
  EXPECT_EQ(cmp.modes[1]["queries"], 2);
}

TEST(EvalRunner, BootstrapIntervalOfAMean) {
  using hypic::eval::bootstrap_mean;
  const auto none = bootstrap_mean({});
  EXPECT_EQ(none.mean, 0.0);
  EXPECT_EQ(none.hi, 0.0);
  const auto same = bootstrap_mean(std::vector<double>(50, -0.25));  // no spread: a point
  EXPECT_DOUBLE_EQ(same.lo, -0.25);
  EXPECT_DOUBLE_EQ(same.hi, -0.25);
  // 400 questions, half right: the interval is about mean ± 1.96·0.5/√400 = ± 0.049.
  std::vector<double> coin(400);
  for (size_t i = 0; i < coin.size(); ++i) coin[i] = (i * 7919) % 2 == 0 ? 1.0 : 0.0;
  const auto c = bootstrap_mean(coin);
  EXPECT_DOUBLE_EQ(c.mean, 0.5);
  EXPECT_NEAR(c.lo, 0.451, 0.008);
  EXPECT_NEAR(c.hi, 0.549, 0.008);
  EXPECT_LT(c.lo, c.mean);
  // The same seed gives the same interval; a wider level a wider one.
  const auto again = bootstrap_mean(coin);
  EXPECT_EQ(again.lo, c.lo);
  EXPECT_EQ(again.hi, c.hi);
  const auto wide = bootstrap_mean(coin, 2000, 0.99);
  EXPECT_LT(wide.lo, c.lo);
  EXPECT_GT(wide.hi, c.hi);
  EXPECT_THROW(bootstrap_mean(coin, 0), hypic::Error);
}

TEST(EvalRunner, ReferenceGivesPairedDeltasKlAndTheStateColumn) {
  const PromptTemplate t = qa_template();
  hypic::eval::FullReference ref;
  ref.scores = {{"a", 1.0}, {"b", 0.0}};
  ref.first_logits = {{"a", {0.0f, 0.0f}}, {"b", {1.0f, 0.0f}}};
  ModeScorer pic(Mode::Pic, t, &ref);
  QueryResult r;
  r.times.ttft = 0.002;
  r.first_logits = {0.0f, 0.0f};
  r.state_shares = {{0, 0, 0.0}, {1, 0, 0.5}, {0, 2, 0.25}, {1, 2, 0.25}};
  const auto la = pic.add({example("a", {"s"}, {"Paris"}), {}}, r, "Rome");  // 1 -> 0
  EXPECT_DOUBLE_EQ(la["delta_vs_full"].get<double>(), -1.0);
  EXPECT_DOUBLE_EQ(la["first_token_kl"].get<double>(), 0.0);  // the same logits
  EXPECT_DOUBLE_EQ(la["state_contribution"]["0"].get<double>(), 0.25);
  r.state_shares = {{0, 0, 0.75}, {0, 2, 0.25}};
  const auto lb = pic.add({example("b", {"s"}, {"Paris"}), {}}, r, "Rome");  // 0 -> 0
  EXPECT_DOUBLE_EQ(lb["delta_vs_full"].get<double>(), 0.0);
  // KL(softmax(1,0) ‖ softmax(0,0)) = log 2 − H(p).
  const double p = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(lb["first_token_kl"].get<double>(),
              p * std::log(2 * p) + (1 - p) * std::log(2 * (1 - p)), 1e-6);
  const auto share = pic.state_contribution();
  EXPECT_DOUBLE_EQ(share.at(0), 0.5);  // mean over examples of (0 + 0.5) / 2 and 0.75
  EXPECT_DOUBLE_EQ(share.at(2), 0.25);

  // With a template header, segments 0, 2, ... are headers, not passage boundaries: left out.
  PromptTemplate th = t;
  th.header = "<{index}>";
  ModeScorer headed(Mode::Pic, th, &ref);
  r.state_shares = {{0, 0, 0.9}, {1, 0, 0.5}, {2, 0, 0.9}, {3, 0, 0.25}, {0, 2, 0.9}, {1, 2, 0.25}};
  const auto lh = headed.add({example("a", {"s", "t"}, {"Paris"}), {}}, r, "Rome");
  EXPECT_DOUBLE_EQ(lh["state_contribution"]["0"].get<double>(), 0.375);
  EXPECT_DOUBLE_EQ(lh["state_contribution"]["2"].get<double>(), 0.25);
  r.state_shares = {{0, 0, 0.9}};  // only a header: no figure for this example
  EXPECT_FALSE(
      headed.add({example("b", {"s"}, {"Paris"}), {}}, r, "Rome").contains("state_contribution"));
  EXPECT_DOUBLE_EQ(headed.state_contribution().at(0), 0.375);
  EXPECT_TRUE(hypic::eval::is_header_segment(th, 2));
  EXPECT_FALSE(hypic::eval::is_header_segment(th, 3));
  EXPECT_FALSE(hypic::eval::is_header_segment(t, 0));

  const auto cmp = hypic::eval::compare_modes({pic}, {"p.jsonl"}, t.metric);
  // No full mode here: Δ is the mean paired difference to the reference.
  EXPECT_NE(cmp.table.find("| pic | 0.00 | -50.00 | 0.00 |"), std::string::npos) << cmp.table;
  EXPECT_NE(cmp.table.find("| 0.375 |"), std::string::npos) << cmp.table;  // mean of layers
  const auto& m = cmp.modes[0];
  EXPECT_DOUBLE_EQ(m["delta_vs_full"].get<double>(), -0.5);
  ASSERT_TRUE(m["delta_ci95"].is_array());
  EXPECT_DOUBLE_EQ(m["delta_ci95"][0].get<double>(), -1.0);  // resamples of {-1, 0}
  EXPECT_DOUBLE_EQ(m["delta_ci95"][1].get<double>(), 0.0);
  EXPECT_EQ(m["first_token_kl"]["examples"], 2);
  EXPECT_DOUBLE_EQ(m["state_contribution"]["mean"].get<double>(), 0.375);
  EXPECT_EQ(m["state_contribution"]["layers"].size(), 2u);

  // Two runs merged into one table: pic rows carry their junction.
  nlohmann::json s1 = {
      {"dataset", "toy"}, {"metric_label", "F1"}, {"junction", "8"}, {"modes", cmp.modes}};
  nlohmann::json s2 = s1;
  s2["junction"] = "0";
  s2["dataset"] = "toy2";
  const std::string merged = hypic::eval::merge_tables({s1, s2});
  EXPECT_NE(
      merged.find("| toy | pic (W=8) | F1 | 0.00 | 0.00 | -50.00 | [-100.00, +0.00] | 0.0555 |"),
      std::string::npos)
      << merged;
  EXPECT_NE(merged.find("| toy2 | pic (W=0) |"), std::string::npos) << merged;
  EXPECT_THROW(hypic::eval::merge_tables({nlohmann::json{{"dataset", "x"}}}), hypic::Error);
}

TEST(EvalRunner, PercentileIsNumpysLinear) {
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({}, 50), 0.0);
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({3, 1, 2, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({3, 1, 2, 4}, 99), 3.97);
}

}  // namespace eval_runner_test
}  // namespace
