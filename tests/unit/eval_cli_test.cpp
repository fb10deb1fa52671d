// `hypic eval` through the built binary on a tiny random model (byte-level tokenizer): every
// mode over the HotpotQA fixture, the output files and table, cache hits after the warm-up,
// and one-line errors for an unknown dataset and a malformed file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_test_util.hpp"

namespace {
namespace eval_cli_test {
namespace fs = std::filesystem;
using nlohmann::json;

using cli_test::CliRun;
using cli_test::slurp;

class EvalCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_eval_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 5 --out " +
                           (dir_ / "model").string());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  static std::string base_args(const std::string& dataset, const std::string& input) {
    return "eval --byte-tokenizer --model " + (dir_ / "model").string() + " --dataset " + dataset +
           " --input " + input +
           " --templates " HYPIC_TEST_DATA_DIR "/../../inputs/datasets/templates.json";
  }
  static void expect_one_line_error(const CliRun& r, const std::string& needle) {
    cli_test::expect_one_line_error(r, needle);
  }
};
fs::path EvalCli::dir_;

TEST_F(EvalCli, EveryModeOverHotpotqa) {
  const fs::path out = dir_ / "run";
  const CliRun r = hypic(base_args("hotpotqa", HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl") +
                         " --modes full,prefix,pic,pic-addition --limit 2 --max-new-tokens 3" +
                         " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("eval: warm-up"), std::string::npos) << r.err;  // progress lines
  const std::string table = slurp(out / "table.md");
  for (const char* mode : {"full", "prefix", "pic", "pic-addition"}) {
    EXPECT_NE(table.find(std::string("| ") + mode + " |"), std::string::npos) << table;
    EXPECT_NE(r.out.find(std::string("| ") + mode + " |"), std::string::npos) << r.out;
    const fs::path pred = out / mode / "hotpotqa.jsonl";
    ASSERT_TRUE(fs::exists(pred)) << pred;
    std::ifstream in(pred);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      const json j = json::parse(line);
      for (const char* key : {"pred", "answers", "all_classes", "length", "_id", "ttft_ms", "hits",
                              "colds", "score", "em", "f1"})
        EXPECT_TRUE(j.contains(key)) << key << " in " << line;
      EXPECT_TRUE(j["pred"].is_string());
      ++n;
    }
    EXPECT_EQ(n, 2) << mode;
    EXPECT_TRUE(fs::exists(out / mode / "metrics.json"));
  }
  EXPECT_NE(table.find("| F1 |"), std::string::npos) << table;
  EXPECT_TRUE(fs::exists(out / "store.h5"));

  const json s = json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(s["metric"], "qa_f1");
  EXPECT_EQ(s["examples"], 2);
  ASSERT_EQ(s["modes"].size(), 4u);
  EXPECT_EQ(s["modes"][0]["delta_vs_full"].get<double>(), 0.0);
  EXPECT_GT(s["warmup"]["computed"].get<int>(), 0);
  for (int i : {0, 1}) {  // full and prefix use no entries
    EXPECT_EQ(s["modes"][i]["hits"]["store"].get<int>(), 0);
    EXPECT_EQ(s["modes"][i]["hits"]["memory"].get<int>(), 0);
  }
  for (int i : {2, 3}) {  // warmed: every segment is a hit
    const json& m = s["modes"][i];
    EXPECT_GT(m["hits"]["store"].get<int>() + m["hits"]["memory"].get<int>(), 0) << m;
    EXPECT_EQ(m["colds"].get<int>(), 0) << m;
    EXPECT_GT(m["ttft_ms"]["p50"].get<double>(), 0.0);
  }

  // A second run over the same store finds every segment already stored.
  const CliRun again = hypic(base_args("hotpotqa", HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl") +
                             " --modes pic --limit 2 --max-new-tokens 3 --out " +
                             (dir_ / "run2").string() + " --store " + (out / "store.h5").string());
  ASSERT_EQ(again.code, 0) << again.err;
  const json s2 = json::parse(slurp(dir_ / "run2" / "summary.json"));
  EXPECT_EQ(s2["warmup"]["computed"].get<int>(), 0);
  EXPECT_TRUE(s2["modes"][0]["delta_vs_full"].is_null());
  EXPECT_NE(again.out.find("| n/a |"), std::string::npos) << again.out;
}

// The quality table's pieces: full runs first whatever the order, KL and the state
// contribution for the pic modes, a W = 0 run compared with the first run's full mode
// (--reference), and both runs merged by `hypic eval-table`.
TEST_F(EvalCli, ReferenceRunAndMergedTable) {
  const fs::path a = dir_ / "ref8", b = dir_ / "ref0";
  const std::string data = HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl";
  const CliRun r =
      hypic(base_args("hotpotqa", data) +
            " --modes pic,full,pic-addition --limit 3 --max-new-tokens 2 --out " + a.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json s = json::parse(slurp(a / "summary.json"));
  ASSERT_EQ(s["modes"].size(), 3u);
  EXPECT_EQ(s["modes"][0]["mode"], "full");
  EXPECT_TRUE(s["modes"][0]["first_token_kl"].is_null());
  EXPECT_TRUE(s["modes"][0]["state_contribution"].is_null());
  for (int i : {1, 2}) {
    const json& m = s["modes"][i];
    EXPECT_EQ(m["first_token_kl"]["examples"], 3) << m;
    EXPECT_GE(m["first_token_kl"]["mean"].get<double>(), 0.0);
    ASSERT_TRUE(m["delta_ci95"].is_array()) << m;
    EXPECT_LE(m["delta_ci95"][0].get<double>(), m["delta_vs_full"].get<double>());
    EXPECT_GE(m["delta_ci95"][1].get<double>(), m["delta_vs_full"].get<double>());
    ASSERT_FALSE(m["state_contribution"].is_null()) << m;
    EXPECT_FALSE(m["state_contribution"]["layers"].empty());
  }
  const auto bytes = fs::file_size(a / "full" / "first_token_logits.f32");
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(bytes % (3 * sizeof(float)), 0u);

  const CliRun r0 = hypic(base_args("hotpotqa", data) + " --modes pic --junction 0 --limit 3" +
                          " --max-new-tokens 2 --reference " + a.string() + " --out " + b.string());
  ASSERT_EQ(r0.code, 0) << r0.err;
  const json s0 = json::parse(slurp(b / "summary.json"));
  EXPECT_FALSE(s0["modes"][0]["delta_vs_full"].is_null());
  EXPECT_EQ(s0["modes"][0]["first_token_kl"]["examples"], 3);

  const CliRun t = hypic("eval-table " + a.string() + " " + b.string() + " --out " +
                         (dir_ / "merged.md").string());
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* row : {"| hotpotqa | full |", "| hotpotqa | pic (W=8) |",
                          "| hotpotqa | pic-addition (W=8) |", "| hotpotqa | pic (W=0) |"})
    EXPECT_NE(t.out.find(row), std::string::npos) << row << "\n" << t.out;
  EXPECT_EQ(slurp(dir_ / "merged.md"), t.out);

  // A reference run needs its full mode; a run with full refuses one.
  expect_one_line_error(hypic(base_args("hotpotqa", data) + " --modes pic --reference " +
                              (dir_ / "nowhere").string() + " --out " + (dir_ / "x").string()),
                        "cannot be read");
  expect_one_line_error(hypic(base_args("hotpotqa", data) + " --modes full --reference " +
                              a.string() + " --out " + (dir_ / "y").string()),
                        "--reference");
  expect_one_line_error(hypic("eval-table " + (dir_ / "nowhere").string()), "summary.json");
}

TEST_F(EvalCli, SummaryDatasetUsesRougeL) {
  const fs::path out = dir_ / "news";
  const CliRun r = hypic(base_args("multi_news", HYPIC_TEST_DATA_DIR "/datasets/multi_news.jsonl") +
                         " --modes full,pic --limit 1 --max-new-tokens 2 --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| ROUGE-L |"), std::string::npos) << r.out;
  const json s = json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(s["metric"], "rouge_l");
  EXPECT_FALSE(s["modes"][0].contains("em"));
  EXPECT_EQ(s["no_repeat_ngram"], 0) << "multi_news's template has none";
  // --no-repeat-ngram reaches the decoder (PicModes.NoRepeatNgramHoldsInEveryMode checks the
  // rule itself): with N = 1 no token may come twice, which changes a random model's answer.
  const auto pred = [](const fs::path& run) {
    const std::string lines = slurp(run / "full" / "multi_news.jsonl");
    return json::parse(lines.substr(0, lines.find('\n')))["pred"].get<std::string>();
  };
  const fs::path plain = dir_ / "news_plain", once = dir_ / "news_once";
  const std::string args =
      base_args("multi_news", HYPIC_TEST_DATA_DIR "/datasets/multi_news.jsonl") +
      " --modes full --limit 1 --max-new-tokens 40 --out ";
  ASSERT_EQ(hypic(args + plain.string()).code, 0);
  const CliRun nr = hypic(args + once.string() + " --no-repeat-ngram 1");
  ASSERT_EQ(nr.code, 0) << nr.err;
  EXPECT_EQ(json::parse(slurp(once / "summary.json"))["no_repeat_ngram"], 1);
  EXPECT_NE(pred(plain), pred(once));
}

// LongBench's "Passage N:" as the template's header, a segment of its own: three passages in
// three orders are 3 headers + 3 passages in the store, not 9 position-bound entries as with
// the header inside the segment, and the prompt is the same text either way.
TEST_F(EvalCli, HeaderKeepsAPassageOneStoreEntryAtAnyPosition) {
  const fs::path data = dir_ / "rotated.jsonl";
  {
    const char* p[3] = {"Avik\\nAvik is a port.", "Brask\\nBrask is a city.",
                        "Coll\\nColl is an isle."};
    std::ofstream f(data);
    for (int q = 0; q < 3; ++q)
      f << R"({"input": "Which?", "context": "Passage 1:\n)" << p[q % 3] << R"(\nPassage 2:\n)"
        << p[(q + 1) % 3] << R"(\nPassage 3:\n)" << p[(q + 2) % 3]
        << R"(", "answers": ["Avik"], "_id": "r)" << q << "\"}\n";
  }
  // The committed hotpotqa template with its header put back inside the segment.
  json t =
      json::parse(slurp(HYPIC_TEST_DATA_DIR "/../../inputs/datasets/templates.json"))["hotpotqa"];
  ASSERT_EQ(t["header"], "Passage {index}:\n");
  t["segment"] = t["header"].get<std::string>() + t["segment"].get<std::string>();
  t.erase("header");
  const fs::path inline_tmpl = dir_ / "inline-templates.json";
  std::ofstream(inline_tmpl) << json{{"hotpotqa", t}}.dump();
  const auto eval = [&](const std::string& name, const std::string& tmpl) {
    const fs::path out = dir_ / name;
    std::string args = base_args("hotpotqa", data.string()) + " --modes pic --out " + out.string();
    if (!tmpl.empty())
      args = "eval --byte-tokenizer --model " + (dir_ / "model").string() +
             " --dataset hotpotqa --input " + data.string() + " --templates " + tmpl +
             " --modes pic --out " + out.string();
    const CliRun r = hypic(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return json::parse(slurp(out / "summary.json"));
  };
  const json headed = eval("headed", "");
  const json inlined = eval("inlined", inline_tmpl.string());
  EXPECT_EQ(headed["warmup"]["segments"], 18);
  EXPECT_EQ(headed["warmup"]["computed"], 6);
  EXPECT_EQ(inlined["warmup"]["segments"], 9);
  EXPECT_EQ(inlined["warmup"]["computed"], 9);
  const auto tokens = [&](const std::string& name) {
    std::vector<int> n;
    std::ifstream in(dir_ / name / "pic" / "hotpotqa.jsonl");
    for (std::string line; std::getline(in, line);)
      n.push_back(json::parse(line)["prompt_tokens"].get<int>());
    return n;
  };
  EXPECT_EQ(tokens("headed").size(), 3u);
  EXPECT_EQ(tokens("headed"), tokens("inlined"));  // byte tokenizer: the same prompt text
}

TEST_F(EvalCli, BadInputsFailWithOneLine) {
  expect_one_line_error(
      hypic(base_args("nosuchset", HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl") + " --out " +
            (dir_ / "bad1").string()),
      "nosuchset");
  expect_one_line_error(
      hypic(base_args("hotpotqa", HYPIC_TEST_DATA_DIR "/datasets/malformed.jsonl") + " --out " +
            (dir_ / "bad2").string()),
      "malformed.jsonl");
  expect_one_line_error(
      hypic(base_args("hotpotqa", HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl") +
            " --modes full,fast --out " + (dir_ / "bad3").string()),
      "fast");
  expect_one_line_error(
      hypic(base_args("hotpotqa", HYPIC_TEST_DATA_DIR "/datasets/hotpotqa.jsonl") +
            " --no-repeat-ngram -2 --out " + (dir_ / "bad4").string()),
      "--no-repeat-ngram");
  EXPECT_FALSE(fs::exists(dir_ / "bad1"));
  EXPECT_FALSE(fs::exists(dir_ / "bad2"));
}

}  // namespace eval_cli_test
}  // namespace
