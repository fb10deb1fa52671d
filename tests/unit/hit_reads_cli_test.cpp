// Serve's hit reads through the built binary (issue 46, item 2): after a sharded warm-up,
// `mpirun hypic serve --hit-reads owner` has each worker read the hits in the shard it wrote and
// send them to rank 0; the predictions (answers, and the first-token KL and hidden-state error
// against full recompute, which read the logits) equal those of `--hit-reads rank0` and `auto`.
// A shard whose writer rank is not in the job is read by rank 0 with one line; a worker that
// cannot read its shard is named with its rank, host and the shard.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {
namespace hit_reads_cli_test {
namespace fs = std::filesystem;
using cli_test::clean_mpi_environment;
using cli_test::CliRun;
using cli_test::slurp;
using nlohmann::json;

class HitReadsCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_hit_reads_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "s");
    CliRun r = cli_test::run_hypic(
        dir_, "model init --arch qwen3_5 --preset tiny --seed 5 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
    cli_test::write_random_corpus(dir_ / "corpus.jsonl", 12, 7, 15, 50);
    std::ofstream q(dir_ / "queries.jsonl");
    q << R"({"id": "q1", "segments": ["doc0", "doc1", "doc2", "doc3"], "question_tokens": [5, 6], "max_new_tokens": 3})"
         "\n";
    q << R"({"id": "q2", "segments": ["doc7", "doc11", "doc5"], "question_tokens": [1], "max_new_tokens": 3})"
         "\n";
    q << R"({"id": "q3", "segments": ["doc4", "doc7", "doc8"], "question_tokens": [2, 9], "max_new_tokens": 3})"
         "\n";
    q.close();
    r = mpirun(3, "warmup --model " + p("model") + " --corpus " + p("corpus.jsonl") + " --store " +
                      p("s/s.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_TRUE(fs::exists(p("s/s.h5.rank2.h5")));
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string p(const std::string& name) { return (dir_ / name).string(); }
  static CliRun mpirun(int n, const std::string& args) {
    return cli_test::run_shell(dir_, clean_mpi_environment() + " " + HYPIC_MPIEXEC + " -n " +
                                         std::to_string(n) + " --oversubscribe " + HYPIC_BINARY +
                                         " " + args);
  }
  // serve on the store in `folder` (read-only there: the queries are all hits), into `out`.
  static CliRun serve(int ranks, const std::string& folder, const std::string& out,
                      const std::string& extra) {
    return mpirun(ranks, "serve --model " + p("model") + " --queries " + p("queries.jsonl") +
                             " --corpus " + p("corpus.jsonl") + " --mode pic --store " +
                             p(folder + "/s.h5") + " --compare-full --out " + p(out) + " " + extra);
  }
  // The prediction lines without their timings and tiers (rank 0 reads a next query's hits
  // into memory while it waits for workers, which moves store hits to memory hits).
  static std::vector<json> predictions(const std::string& out) {
    std::vector<json> lines;
    std::istringstream in(slurp(p(out + "/predictions.jsonl")));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      j.erase("ttft_ms");
      j.erase("hits");
      lines.push_back(j);
    }
    return lines;
  }
};
fs::path HitReadsCli::dir_;

TEST_F(HitReadsCli, OwnerReadsGiveTheSamePredictionsAsRankZeroReads) {
  CliRun r = serve(3, "s", "rank0", "--hit-reads rank0");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<json> reference = predictions("rank0");
  ASSERT_EQ(reference.size(), 3u);
  json m = json::parse(slurp(p("rank0/metrics.json")));
  EXPECT_EQ(m["hits"]["store"].get<int>(), 9) << m.dump();
  EXPECT_EQ(m["hits_read_by_workers"].get<int>(), 0);
  EXPECT_EQ(m["hit_reads"], "rank0");

  r = serve(3, "s", "owner", "--hit-reads owner");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("serve: hit reads owner: rank 1 reads " + p("s/s.h5.rank1.h5") +
                       ", rank 2 reads " + p("s/s.h5.rank2.h5")),
            std::string::npos)
      << r.err;
  EXPECT_EQ(predictions("owner"), reference);
  m = json::parse(slurp(p("owner/metrics.json")));
  EXPECT_EQ(m["hits"]["store"].get<int>(), 9) << m.dump();
  EXPECT_EQ(m["hits_read_by_workers"].get<int>(), 9) << m.dump();
  EXPECT_GT(m["hit_bytes_from_workers"].get<uint64_t>(), 0u);
  EXPECT_EQ(m["cold"].get<int>(), 0);

  // auto: rank 0 opens every shard here (one file system), so it reads them itself.
  r = serve(3, "s", "auto", "");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("serve: hit reads auto: rank 0 reads every hit"), std::string::npos)
      << r.err;
  EXPECT_EQ(predictions("auto"), reference);
  EXPECT_EQ(json::parse(slurp(p("auto/metrics.json")))["hits_read_by_workers"].get<int>(), 0);

  // Two ranks: rank 2's shard has no worker in the job; rank 0 reads it, said in one line.
  r = serve(2, "s", "two", "--hit-reads owner");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("serve: shard " + p("s/s.h5.rank2.h5") +
                       ": its writer, rank 2, is not in this job of 2 ranks; rank 0 reads its "
                       "hits\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(predictions("two"), reference);
  m = json::parse(slurp(p("two/metrics.json")));
  EXPECT_GT(m["hits_read_by_workers"].get<int>(), 0) << m.dump();
  EXPECT_LT(m["hits_read_by_workers"].get<int>(), 9) << m.dump();
  EXPECT_EQ(m["hits"]["store"].get<int>() + m["hits"]["memory"].get<int>(), 10) << m.dump();

  r = cli_test::run_hypic(dir_, "serve --model " + p("model") + " --queries " + p("queries.jsonl") +
                                    " --out " + p("x") + " --hit-reads some");
  cli_test::expect_one_line_error(r, "--hit-reads must be auto, rank0 or owner, got 'some'");
}

// A worker that cannot read its shard (here a damaged copy of the store's folder: rank 2's shard
// overwritten) ends `--hit-reads owner` with one line naming its rank, host and the shard.
TEST_F(HitReadsCli, AShardItsWorkerCannotReadIsNamedWithRankAndHost) {
  fs::create_directories(dir_ / "bad");
  for (const auto& f : fs::directory_iterator(dir_ / "s"))
    fs::copy_file(f.path(), dir_ / "bad" / f.path().filename(),
                  fs::copy_options::overwrite_existing);
  const std::string shard = p("bad/s.h5.rank2.h5");
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    const std::string junk(4096, 'z');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  CliRun r = serve(3, "bad", "bad-out", "--hit-reads owner");
  EXPECT_NE(r.code, 0) << r.err;
  const std::regex line("hypic: error: worker rank 2 \\(pid [0-9]+ on " + cli_test::host_name() +
                        "\\) cannot read its shard " + shard + ": [^\n]*--hit-reads rank0");
  EXPECT_TRUE(std::regex_search(r.err, line)) << r.err;
  EXPECT_EQ(cli_test::error_lines(r.err), 1u) << r.err;
}

}  // namespace hit_reads_cli_test
}  // namespace
