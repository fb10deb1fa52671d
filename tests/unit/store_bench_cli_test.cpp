// `hypic bench store` and `hypic bench scaling --warmup-config` through the built binary:
// rows for every writer count (figures are the bench's business, not the test's), the
// warm-up table for 1-64 nodes x 1-8 workers with the issue-46 target met at 64 nodes, and
// one-line refusals of bad options.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "cli_test_util.hpp"

namespace {
namespace store_bench_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;

class StoreBenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hypic_store_bench_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  fs::path dir_;
};

TEST_F(StoreBenchCli, MeasuresEveryWriterCountAndLeavesNoFiles) {
  const fs::path stores = dir_ / "stores";
  fs::create_directories(stores);
  const CliRun r = hypic("bench store --dir " + stores.string() +
                         " --writers 1,2 --entries 3 --entry-mib 0.5 --reps 1 --dtype f32");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // writers, entries, write s, write GB/s, write entries/s, read s, read GB/s, read entries/s
  for (const char* writers : {"1", "2"}) {
    const std::regex row(std::string("\\n\\s+") + writers +
                         "\\s+(\\d+)\\s+([0-9.]+)\\s+[0-9.]+\\s+([0-9.]+)\\s+([0-9.]+)\\s+[0-9.]+"
                         "\\s+([0-9.]+)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, row)) << r.out;
    EXPECT_EQ(std::stoi(m[1]), 3 * std::stoi(writers));
    EXPECT_GT(std::stod(m[2]), 0.0);  // write seconds
    EXPECT_GT(std::stod(m[3]), 0.0);  // write entries/s
    EXPECT_GT(std::stod(m[4]), 0.0);  // read seconds
    EXPECT_GT(std::stod(m[5]), 0.0);  // read entries/s
  }
  EXPECT_TRUE(fs::is_empty(stores));  // every writer's store removed
}

TEST_F(StoreBenchCli, RefusesBadOptionsWithOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"--writers 0", "--writers"},  {"--writers 1,x", "--writers"},
      {"--entries 0", "--entries"},  {"--entry-mib -1", "--entry-mib"},
      {"--dtype i8", "i8"},          {"--reps 0", "--reps"},
      {"--writers 257", "[1, 256]"}, {"--writers 99999999999999999999", "--writers"}};
  for (const auto& [bad, needle] : cases) {
    const CliRun r = hypic("bench store --dir " + dir_.string() + " " + bad);
    EXPECT_NE(r.code, 0) << bad;
    cli_test::expect_one_line_error(r, needle);
  }
  const CliRun r = hypic("bench store --dir " + (dir_ / "absent").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("is not a folder"), std::string::npos) << r.err;
}

TEST_F(StoreBenchCli, WarmupSimulationPrintsTheGridAndPerNodeWritersScale) {
  const CliRun r =
      hypic("bench scaling --warmup-config " HYPIC_TEST_DATA_DIR "/configs/qwen3.5-35b-a3b.json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // nodes, workers/node, compute, single e/s, GB/s, bound..., per-node e/s, GB/s, bound, ratio
  const std::regex row(
      R"(\n\s*(\d+)\s+(\d+)\s+[0-9.]+ \|\s+([0-9.]+)\s+[0-9.]+\s+[a-z0-9 ]+?\s+\|\s+([0-9.]+)\s+[0-9.]+\s+[a-z0-9 ]+?\s+([0-9.]+) \|\s+([0-9.]+) s)");
  int rows = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), row), end; it != end; ++it) {
    ++rows;
    const int nodes = std::stoi((*it)[1]), workers = std::stoi((*it)[2]);
    const double single = std::stod((*it)[3]), shards = std::stod((*it)[4]);
    EXPECT_GE(shards, single) << nodes << "x" << workers;
    EXPECT_GT(std::stod((*it)[6]), 0.0);
    if (nodes == 64) {
      EXPECT_GE(std::stod((*it)[5]), 0.8) << nodes << "x" << workers;
    }
  }
  EXPECT_EQ(rows, 28) << r.out;
  std::smatch m;  // the entry size model info --config gives: tens of MB per 512 tokens
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(entry ([0-9.]+) MB per 512-token)")));
  EXPECT_GT(std::stod(m[1]), 40.0);
  EXPECT_LT(std::stod(m[1]), 100.0);
}

}  // namespace store_bench_cli_test
}  // namespace
