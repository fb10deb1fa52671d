// The library side of `hypic eval` without the CLI, MPI or a model: prompts as queries
// (byte-level tokenizer: one token per byte), scores per mode, and the comparison table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eval/metrics.hpp"
#include "eval/runner.hpp"

namespace {
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

TEST(EvalRunner, PercentileIsNumpysLinear) {
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({}, 50), 0.0);
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({3, 1, 2, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(hypic::eval::percentile({3, 1, 2, 4}, 99), 3.97);
}

}  // namespace
