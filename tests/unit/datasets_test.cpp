// Dataset readers and prompt templates: the fixtures of scripts/make_dataset_fixtures.py
// split into the expected segments, and prefix + segments + suffix rebuild the prompt
// LongBench itself builds; malformed lines are reported by line number or skipped.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "eval/datasets.hpp"
#include "eval/templates.hpp"

namespace {

using nlohmann::json;
namespace ev = hypic::eval;

const std::string kData = std::string(HYPIC_TEST_DATA_DIR) + "/datasets/";
const std::string kTemplates =
    std::string(HYPIC_TEST_DATA_DIR) + "/../../inputs/datasets/templates.json";

const json& expected() {
  static const json j = [] {
    std::ifstream in(kData + "expected.json");
    std::ostringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
  }();
  return j;
}

const ev::TemplateSet& templates() {
  static const ev::TemplateSet t = ev::TemplateSet::load(kTemplates);
  return t;
}

std::vector<ev::Example> read(const std::string& dataset, size_t max_segment_bytes = 4000) {
  const auto& t = templates().get(dataset);
  ev::ReadOptions opt;
  opt.max_segment_bytes = max_segment_bytes;
  return ev::read_dataset(kData + dataset + ".jsonl", dataset, t.split, opt).examples;
}

TEST(Datasets, LongBenchQaSetsSplitAtPassageMarkersAndRebuildTheirPrompt) {
  for (const std::string ds : {"hotpotqa", "2wikimqa", "musique"}) {
    const auto examples = read(ds);
    ASSERT_GE(examples.size(), 2u) << ds;
    for (const auto& ex : examples) {
      const auto& want = expected().at(ex.id);
      EXPECT_EQ(ex.dataset, ds);
      EXPECT_EQ(ex.segments, want["segments"].get<std::vector<std::string>>()) << ex.id;
      EXPECT_EQ(ev::render_prompt(templates().get(ds), ex), want["prompt"].get<std::string>())
          << ex.id;
      EXPECT_FALSE(ex.question.empty());
      EXPECT_FALSE(ex.answers.empty());
      EXPECT_GT(ex.length, 0);
    }
  }
}

TEST(Datasets, MultiNewsSplitsAtDocumentBoundaries) {
  const auto examples = read("multi_news");
  ASSERT_EQ(examples.size(), 2u);
  for (const auto& ex : examples) {
    const auto& want = expected().at(ex.id);
    EXPECT_EQ(ex.segments, want["segments"].get<std::vector<std::string>>()) << ex.id;
    if (want["prompt_exact"].get<bool>()) {
      EXPECT_EQ(ev::render_prompt(templates().get("multi_news"), ex),
                want["prompt"].get<std::string>());
    }
    EXPECT_EQ(ex.answers.size(), 1u);
  }
  // Without markers or "|||||", blank lines separate documents.
  EXPECT_EQ(ev::split_context("one\nstill one\n\n \n\ntwo\n\nthree", ev::SplitRule::kDocuments),
            (std::vector<std::string>{"one\nstill one", "two", "three"}));
}

TEST(Datasets, TriviaQaSplitsIntoFewShotExamples) {
  const auto examples = read("triviaqa");
  ASSERT_EQ(examples.size(), 1u);
  const auto& ex = examples[0];
  const auto& want = expected().at(ex.id);
  EXPECT_EQ(ex.segments, want["segments"].get<std::vector<std::string>>());
  EXPECT_EQ(ev::render_prompt(templates().get("triviaqa"), ex), want["prompt"].get<std::string>());
  EXPECT_TRUE(templates().get("triviaqa").answer_first_line);
}

TEST(Datasets, GovReportIsChunkedAtLineBoundaries) {
  const auto& want = expected().at("gr-001");
  const size_t limit = want["max_segment_bytes"].get<size_t>();
  const auto examples = read("gov_report", limit);
  ASSERT_EQ(examples.size(), 1u);
  const auto& ex = examples[0];
  EXPECT_GE(ex.segments.size(), 3u);
  for (const auto& s : ex.segments) EXPECT_LE(s.size(), limit);
  EXPECT_EQ(ev::render_prompt(templates().get("gov_report"), ex),
            want["prompt"].get<std::string>());
  // An over-long line is cut after a space, or at a character boundary.
  const std::string line = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda";
  const auto parts = ev::split_context(line, ev::SplitRule::kChunks, 20);
  std::string joined;
  for (const auto& p : parts) {
    EXPECT_LE(p.size(), 20u);
    joined += p;
  }
  EXPECT_EQ(joined, line);
  for (const auto& p : ev::split_context(std::string(50, 'x') + "é" + std::string(50, 'y'),
                                         ev::SplitRule::kChunks, 16))
    EXPECT_NE(static_cast<unsigned char>(p[0]) & 0xC0, 0x80u);
}

TEST(Datasets, OriginalHotpotQaJson) {
  const auto& t = templates().get("hotpotqa");
  const auto r = ev::read_dataset(kData + "hotpotqa_original.json", "hotpotqa", t.split);
  ASSERT_EQ(r.examples.size(), 2u);
  const auto& ex = r.examples[0];
  EXPECT_EQ(ex.id, "5a8b57f25542995d1e6f1371");
  EXPECT_EQ(ex.segments, expected().at(ex.id)["segments"].get<std::vector<std::string>>());
  EXPECT_EQ(ex.answers, std::vector<std::string>{"Ilse Maren"});
  EXPECT_EQ(r.examples[1].segments.size(), 3u);
  EXPECT_EQ(ev::read_hotpotqa_json(kData + "hotpotqa_original.json", {false, 1}).examples.size(),
            1u);
}

TEST(Datasets, MalformedLinesAreReportedByLineOrSkipped) {
  try {
    ev::read_longbench_jsonl(kData + "malformed.jsonl", "hotpotqa", ev::SplitRule::kPassages);
    FAIL() << "malformed file accepted";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed.jsonl:3:"), std::string::npos) << e.what();
  }
  ev::ReadOptions skip;
  skip.skip_malformed = true;
  const auto r = ev::read_longbench_jsonl(kData + "malformed.jsonl", "hotpotqa",
                                          ev::SplitRule::kPassages, skip);
  ASSERT_EQ(r.examples.size(), 3u);
  EXPECT_EQ(r.examples[1].id, "hp-001b");
  ASSERT_EQ(r.skipped.size(), 3u);
  EXPECT_EQ(r.skipped[0].line, 3u);
  EXPECT_EQ(r.skipped[1].line, 5u);
  EXPECT_NE(r.skipped[1].reason.find("context"), std::string::npos) << r.skipped[1].reason;
  EXPECT_EQ(r.skipped[2].line, 6u);
  EXPECT_NE(r.skipped[2].reason.find("answers"), std::string::npos) << r.skipped[2].reason;
  skip.limit = 2;
  EXPECT_EQ(ev::read_longbench_jsonl(kData + "malformed.jsonl", "hotpotqa",
                                     ev::SplitRule::kPassages, skip)
                .examples.size(),
            2u);
  EXPECT_THROW(ev::read_dataset(kData + "missing.jsonl", "hotpotqa", ev::SplitRule::kPassages),
               hypic::Error);
}

TEST(Datasets, SplitRulesEdgeCases) {
  using ev::SplitRule;
  EXPECT_EQ(ev::split_context("no markers here\n", SplitRule::kPassages),
            std::vector<std::string>{"no markers here"});
  EXPECT_EQ(ev::split_context("intro\nPassage 1:\nA\nPassage 22:\nB", SplitRule::kPassages),
            (std::vector<std::string>{"intro", "A", "B"}));
  // "Passage 3: text" on one line is not a marker; neither is one in mid-line.
  EXPECT_EQ(ev::split_context("Passage 1:\nsee Passage 2:\nPassage 3: x", SplitRule::kPassages),
            std::vector<std::string>{"see Passage 2:\nPassage 3: x"});
  EXPECT_EQ(ev::split_context("a ||||| b|||||c", SplitRule::kDocuments),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ev::split_context("  ", SplitRule::kWhole), std::vector<std::string>{});
  EXPECT_EQ(ev::parse_split_rule("chunks"), SplitRule::kChunks);
  EXPECT_EQ(ev::split_rule_name(SplitRule::kExamples), "examples");
  EXPECT_THROW(ev::parse_split_rule("sentences"), hypic::Error);
}

TEST(Templates, LoadsOneFileForEveryDataset) {
  const auto names = templates().names();
  for (const std::string ds :
       {"hotpotqa", "2wikimqa", "musique", "multi_news", "triviaqa", "gov_report"})
    EXPECT_TRUE(templates().has(ds)) << ds;
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(templates().get("hotpotqa_e").dataset, "hotpotqa");
  EXPECT_EQ(templates().get("multi_news").metric, "rouge_l");
  EXPECT_EQ(templates().get("gov_report").max_answer_tokens, 512);
  EXPECT_EQ(templates().get("hotpotqa").max_answer_tokens, 32);
  try {
    templates().get("narrativeqa");
    FAIL();
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: 2wikimqa"), std::string::npos) << e.what();
  }
  const auto& t = templates().get("hotpotqa");
  EXPECT_EQ(ev::render_segment(t, 7, "T\nbody {index}"), "Passage 7:\nT\nbody {index}\n");
  const std::string suffix = ev::render_suffix(t, "Q?");
  const std::string tail = "\n\nQuestion: Q?\nAnswer:";
  ASSERT_GE(suffix.size(), tail.size());
  EXPECT_EQ(suffix.substr(suffix.size() - tail.size()), tail);
}

TEST(Templates, RefusesBrokenTemplateFiles) {
  EXPECT_THROW(ev::TemplateSet::parse("{", "t.json"), hypic::Error);
  EXPECT_THROW(ev::TemplateSet::parse(R"({"x": {"prefix": ""}})", "t.json"), hypic::Error);
  EXPECT_THROW(ev::TemplateSet::parse(R"({"x": {"prefix": "", "segment": "no text", "suffix": "",
      "max_answer_tokens": 5, "split": "whole", "metric": "qa_f1"}})",
                                      "t.json"),
               hypic::Error);
  EXPECT_THROW(ev::TemplateSet::parse(R"({"x": {"prefix": "", "segment": "{text}", "suffix": "",
      "max_answer_tokens": 5, "split": "whole", "metric": "bleu"}})",
                                      "t.json"),
               hypic::Error);
  const auto ok = ev::TemplateSet::parse(R"({"_comment": "c", "x": {"prefix": "P", "segment":
      "[{text}]", "suffix": "{input}?", "max_answer_tokens": 5, "split": "whole",
      "metric": "exact_match"}})",
                                         "t.json");
  ev::Example ex;
  ex.segments = {"a", "b"};
  ex.question = "q";
  EXPECT_EQ(ev::render_prompt(ok.get("x"), ex), "P[a][b]q?");
  EXPECT_THROW(ev::TemplateSet::load(kData + "missing-templates.json"), hypic::Error);
}

}  // namespace
