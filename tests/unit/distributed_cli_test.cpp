// `hypic eval` and `hypic chat` under `mpirun -n N` (N = 1, 2, 3): ranks 1 … N−1 are scatter
// workers (they announce themselves on stderr through HYPIC_DEBUG_WORKER_DELAY_MS), rank 0
// composes, and predictions, answers and cache statistics are those of one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {
namespace distributed_cli_test {
namespace fs = std::filesystem;
using cli_test::clean_mpi_environment;
using cli_test::CliRun;
using cli_test::slurp;
using nlohmann::json;

class DistributedCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_distributed_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const CliRun r = cli_test::run_hypic(
        dir_, "model init --arch qwen3_5 --preset tiny --seed 5 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string p(const std::string& name) { return (dir_ / name).string(); }

  // `hypic ARGS` with `ranks` ranks (1: no launcher), stdin from `stdin_file` when given.
  // Workers say they started (HYPIC_DEBUG_WORKER_DELAY_MS=1: 1 ms before each segment).
  static CliRun run(int ranks, const std::string& args, const std::string& stdin_file = "") {
    std::string cmd = clean_mpi_environment() + " HYPIC_DEBUG_WORKER_DELAY_MS=1 ";
    if (ranks > 1)
      cmd += std::string(HYPIC_MPIEXEC) + " -n " + std::to_string(ranks) + " --oversubscribe ";
    cmd += std::string(HYPIC_BINARY) + " " + args;
    if (!stdin_file.empty()) cmd += " < " + stdin_file;
    return cli_test::run_shell(dir_, cmd);
  }

  static void expect_workers(const CliRun& r, int ranks) {
    for (int w = 1; w < 4; ++w) {
      const bool said =
          r.err.find("worker rank " + std::to_string(w) + " pid") != std::string::npos;
      EXPECT_EQ(said, w < ranks) << "rank " << w << " of " << ranks << ":\n" << r.err;
    }
  }
};
fs::path DistributedCli::dir_;

// Each prediction line without its timing.
std::vector<json> predictions(const fs::path& file) {
  std::vector<json> v;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    j.erase("ttft_ms");
    v.push_back(j);
  }
  return v;
}

TEST_F(DistributedCli, EvalPredictionsDoNotDependOnTheRanks) {
  const std::string common = "eval --byte-tokenizer --model " + p("model") +
                             " --dataset hotpotqa --input " HYPIC_TEST_DATA_DIR
                             "/datasets/hotpotqa.jsonl --templates " HYPIC_TEST_DATA_DIR
                             "/../../inputs/datasets/templates.json --limit 3 --max-new-tokens 4"
                             " --modes full,pic,pic-addition --out ";
  std::vector<std::vector<json>> pic, add, full;
  std::vector<json> warm;
  for (int ranks : {1, 2, 3}) {
    const std::string out = p("eval" + std::to_string(ranks));
    const CliRun r = run(ranks, common + out);
    ASSERT_EQ(r.code, 0) << r.err;
    expect_workers(r, ranks);
    EXPECT_NE(r.err.find("eval: warm-up"), std::string::npos) << r.err;
    // How entries went between the ranks, in each mode's metrics.json.
    const json m = json::parse(slurp(out + "/pic/metrics.json"));
    EXPECT_EQ(m["entry_path"], ranks == 1 ? "in-process" : "host-mpi") << ranks;
    EXPECT_EQ(m["entry_path_reason"],
              ranks == 1 ? "one rank: entries stay in its memory" : "rank 0 computes on the host");
    pic.push_back(predictions(out + "/pic/hotpotqa.jsonl"));
    add.push_back(predictions(out + "/pic-addition/hotpotqa.jsonl"));
    full.push_back(predictions(out + "/full/hotpotqa.jsonl"));
    json w = json::parse(slurp(out + "/summary.json"))["warmup"];
    w.erase("seconds");
    w.erase("store");
    warm.push_back(w);
    cli_test::expect_same_store(p("eval1") + "/store.h5", out + "/store.h5");
  }
  ASSERT_GE(pic[0].size(), 2u);
  EXPECT_GT(warm[0]["computed"].get<int>(), 0);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(pic[i], pic[0]) << "ranks " << i + 1;
    EXPECT_EQ(add[i], add[0]) << "ranks " << i + 1;
    EXPECT_EQ(full[i], full[0]) << "ranks " << i + 1;
    EXPECT_EQ(warm[i], warm[0]) << "ranks " << i + 1;
  }
}

TEST_F(DistributedCli, ChatAnswersDoNotDependOnTheRanks) {
  std::ofstream(dir_ / "chat.txt")
      << "add-text Varnholm was founded in 1622 by salt traders.\n"
         "add-text The Esker lamp was designed by Ilse Maren in 1871.\n"
         "add-text Tolvik lies on the Lenne, north of Brask.\n"
         "ask Who designed the lamp?\n"
         "junction 3\n"
         "ask Where is Tolvik?\n"
         "mode pic-addition\n"
         "ask-on t3,t1 When was Varnholm founded?\n"
         "mode full\n"
         "ask Who founded Varnholm?\n"
         "mode pic\n"
         "ask Where is Tolvik?\n";
  std::vector<std::string> transcripts;
  for (int ranks : {1, 2, 3}) {
    const CliRun r =
        run(ranks, "chat --byte-tokenizer --max-new-tokens 4 --model " + p("model"), p("chat.txt"));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_workers(r, ranks);
    // The run header's entry path depends on the ranks (in-process, host-mpi).
    EXPECT_NE(r.out.find(ranks == 1 ? "entries: in-process" : "entries: host-mpi"),
              std::string::npos)
        << r.out;
    // Everything but the times and that line.
    const std::string out = std::regex_replace(r.out, std::regex("entries: [^\n]*\n"), "");
    transcripts.push_back(std::regex_replace(out, std::regex("ttft [0-9.]+ ms"), "ttft"));
  }
  // Cold segments were computed (by the workers, with more than one rank), then reused.
  EXPECT_NE(transcripts[0].find("hits 0 (memory 0, store 0) | colds 3 | 3 documents,"),
            std::string::npos)
      << transcripts[0];
  EXPECT_NE(transcripts[0].find("hits 3 (memory 3, store 0) | colds 0"), std::string::npos)
      << transcripts[0];
  std::stringstream ss(transcripts[0]);
  int answers = 0;
  for (std::string l; std::getline(ss, l);) answers += l.rfind("answer: ", 0) == 0;
  EXPECT_EQ(answers, 5) << transcripts[0];
  EXPECT_EQ(transcripts[1], transcripts[0]);
  EXPECT_EQ(transcripts[2], transcripts[0]);
}

}  // namespace distributed_cli_test
}  // namespace
