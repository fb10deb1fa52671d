// warmup / serve / eval through the built binary on the tiny preset of every registered
// architecture besides qwen3_5 (ServeCli and EvalCli run qwen3_5 in depth): each caching
// mode end to end, with the full-recompute comparison, so that an architecture that loads
// but cannot be cached position-independently fails here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "model/arch/arch.hpp"

namespace {
namespace arch_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::slurp;
using nlohmann::json;

class ArchCli : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hypic_arch_cli_" + GetParam() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_P(ArchCli, WarmupServeAndEvalInEveryMode) {
  CliRun r =
      hypic("model init --arch " + GetParam() + " --preset tiny --seed 3 --out " + p("model"));
  ASSERT_EQ(r.code, 0) << r.err;
  cli_test::write_random_corpus(p("corpus.jsonl"), 4, 1, 20, 70);
  {
    std::ofstream q(p("queries.jsonl"));
    q << R"({"id": "q1", "segments": ["doc0", "doc1", "doc2"], "question_tokens": [5, 6, 7], "max_new_tokens": 3})"
         "\n";
    q << R"({"id": "q2", "prefix": [1, 2], "segments": ["doc3", "doc1"], "question_tokens": [9], "max_new_tokens": 3})"
         "\n";
  }
  const std::string model = " --model " + p("model");
  r = hypic("warmup" + model + " --corpus " + p("corpus.jsonl") + " --store " + p("store.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 computed, 0 already in the store"), std::string::npos) << r.out;

  for (const char* mode : {"full", "prefix", "pic", "pic-addition"}) {
    const std::string out = p(std::string("out-") + mode);
    const bool pic = std::string(mode).rfind("pic", 0) == 0;
    r = hypic("serve" + model + " --queries " + p("queries.jsonl") + " --corpus " +
              p("corpus.jsonl") + " --mode " + mode + " --junction 8" +
              (pic ? " --store " + p("store.h5") : std::string()) + " --out " + out +
              " --compare-full");
    ASSERT_EQ(r.code, 0) << mode << ": " << r.err;
    const json m = json::parse(slurp(out + "/metrics.json"));
    EXPECT_EQ(m["mode"], mode);
    EXPECT_EQ(m["queries"], 2);
    const double kl = m["compare_full"]["kl_first_token_mean"].get<double>();
    if (!pic) {
      EXPECT_LE(kl, 1e-8) << mode;  // recompute, exactly or from an exact snapshot
    } else {
      EXPECT_EQ(m["cold"], 0) << mode;  // every segment came from the warmed store
      EXPECT_GE(kl, 0.0) << mode;
    }
  }

  r = hypic("eval" + model +
            " --dataset hotpotqa --input " HYPIC_TEST_DATA_DIR
            "/datasets/hotpotqa.jsonl --templates " HYPIC_TEST_DATA_DIR
            "/../../inputs/datasets/templates.json --modes full,prefix,pic,pic-addition "
            "--limit 1 --max-new-tokens 2 --byte-tokenizer --out " +
            p("eval"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json s = json::parse(slurp(dir_ / "eval" / "summary.json"));
  ASSERT_EQ(s["modes"].size(), 4u);
  EXPECT_EQ(s["examples"], 1);
  for (int i : {2, 3}) EXPECT_EQ(s["modes"][i]["colds"].get<int>(), 0) << s["modes"][i];
}

std::vector<std::string> other_architectures() {
  std::vector<std::string> names;
  for (const hypic::model::ArchSpec* a : hypic::model::architectures())
    if (std::string(a->name()) != "qwen3_5") names.push_back(a->name());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Models, ArchCli, ::testing::ValuesIn(other_architectures()),
                         [](const auto& test_param) { return test_param.param; });

}  // namespace arch_cli_test
}  // namespace
