// A sharded warm-up through the built binary (issue 46): `mpirun -n 3 hypic warmup` has each
// worker write its own shard beside the store, and the store reads as one: it equals a
// one-process warm-up entry for entry; `inspect --verify`, `serve` and `store merge` read it
// without a merge; a damaged shard is named by inspect and moved aside and recomputed by the
// next warm-up; `--writers rank0` keeps the single writer. The kill/resume of a sharded
// warm-up is FaultCli's warm-up test (the default there is sharded too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "store/segment_store.hpp"
#include "store/shards.hpp"

namespace {
namespace shard_writers_cli_test {
namespace fs = std::filesystem;
using cli_test::clean_mpi_environment;
using cli_test::CliRun;
using cli_test::slurp;
using hypic::store::OpenMode;
using hypic::store::SegmentStore;
using nlohmann::json;

class ShardWritersCli : public ::testing::Test {
 protected:
  static fs::path dir_;
  static constexpr int kDocs = 12;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_shard_writers_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 5 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
    cli_test::write_random_corpus(dir_ / "corpus.jsonl", kDocs, 7, 15, 50);
    std::ofstream q(dir_ / "queries.jsonl");
    q << R"({"id": "q1", "segments": ["doc0", "doc1", "doc2"], "question_tokens": [5, 6], "max_new_tokens": 2})"
         "\n";
    q << R"({"id": "q2", "segments": ["doc7", "doc11"], "question_tokens": [1], "max_new_tokens": 2})"
         "\n";
    q.close();
    r = hypic("warmup " + model_arg() + " --corpus " + p("corpus.jsonl") + " --store " +
              p("reference.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  static std::string model_arg() { return "--model " + p("model"); }
  static std::string p(const std::string& name) { return (dir_ / name).string(); }
  static CliRun mpirun3(const std::string& args) {
    return cli_test::run_shell(dir_, clean_mpi_environment() + " " + HYPIC_MPIEXEC +
                                         " -n 3 --oversubscribe " + HYPIC_BINARY + " " + args);
  }
  static std::string warmup(const std::string& store) {
    return "warmup " + model_arg() + " --corpus " + p("corpus.jsonl") + " --store " + store;
  }
  // Entries in the store file alone, its shards left out (the manifest moved away meanwhile).
  static uint64_t entries_in_file_alone(const std::string& store) {
    const std::string manifest = hypic::store::shard_manifest_path(store);
    fs::rename(manifest, manifest + ".away");
    const uint64_t n = SegmentStore::open_any(store, OpenMode::kRead).size();
    fs::rename(manifest + ".away", manifest);
    return n;
  }
};
fs::path ShardWritersCli::dir_;

TEST_F(ShardWritersCli, ThreeRankWarmupWritesShardsThatReadAsTheOneProcessStore) {
  const std::string store = p("sharded.h5");
  CliRun r = mpirun3(warmup(store));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("2 workers, each writing its shard"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("12 computed, 0 already in the store"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(the store file and 2 shards)"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(store + ".rank1.h5"));
  ASSERT_TRUE(fs::exists(store + ".rank2.h5"));
  ASSERT_TRUE(fs::exists(store + ".shards.json"));
  // Rank 0 wrote no entry: the workers' shards hold them all.
  EXPECT_EQ(entries_in_file_alone(store), 0u);
  EXPECT_EQ(SegmentStore::open_any(store + ".rank1.h5", OpenMode::kRead).size() +
                SegmentStore::open_any(store + ".rank2.h5", OpenMode::kRead).size(),
            static_cast<uint64_t>(kDocs));
  cli_test::expect_same_store(store, p("reference.h5"));

  r = hypic("inspect --store " + store + " --verify");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("shards         2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("12 entries checked, 12 valid, 0 damaged"), std::string::npos) << r.out;

  // A rerun resumes: nothing to compute.
  r = mpirun3(warmup(store));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 computed, 12 already in the store"), std::string::npos) << r.out;

  // serve reads the hits from the shards, no merge first; one process and three ranks alike.
  for (const std::string& launcher : {std::string("one"), std::string("three")}) {
    const std::string out = p("serve-" + launcher);
    const std::string args = "serve " + model_arg() + " --queries " + p("queries.jsonl") +
                             " --corpus " + p("corpus.jsonl") + " --mode pic --store " + store +
                             " --out " + out;
    r = launcher == "one" ? hypic(args) : mpirun3(args);
    ASSERT_EQ(r.code, 0) << r.err;
    const json m = json::parse(slurp(out + "/metrics.json"));
    EXPECT_EQ(m["cold"].get<int>(), 0) << m.dump();
    EXPECT_EQ(m["hits"]["store"].get<int>(), 5) << m.dump();
  }

  // store merge compacts it into one file, the same entries.
  r = hypic("store merge --out " + p("compact.h5") + " " + store);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  cli_test::expect_same_store(p("compact.h5"), p("reference.h5"));
  EXPECT_FALSE(fs::exists(p("compact.h5.shards.json")));
  EXPECT_EQ(entries_in_file_alone(store), 0u);
}

TEST_F(ShardWritersCli, DamagedShardIsNamedThenMovedAsideAndRecomputed) {
  const std::string store = p("damaged.h5");
  CliRun r = mpirun3(warmup(store));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string shard = store + ".rank2.h5";
  const uint64_t held = SegmentStore::open_any(shard, OpenMode::kRead).size();
  ASSERT_GT(held, 0u);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    const std::string junk(2048, 'z');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  r = hypic("inspect --store " + store + " --verify");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("shard " + shard + ": "), std::string::npos) << r.err;

  r = mpirun3(warmup(store));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warmup: shard " + shard + " is damaged"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("moved to " + shard + ".damaged"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(shard + ".damaged"));  // kept, never deleted
  EXPECT_NE(r.out.find(std::to_string(held) + " computed, " + std::to_string(kDocs - held) +
                       " already in the store"),
            std::string::npos)
      << r.out;
  r = hypic("inspect --store " + store + " --verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  cli_test::expect_same_store(store, p("reference.h5"));
}

// A worker that cannot open its shard (on a cluster: a read-only or full file system on its
// node; here a folder in the shard's place, since root ignores file modes) ends the job with one
// line naming its rank, its host and the shard; nothing is lost, and a rerun completes.
TEST_F(ShardWritersCli, AShardItsWorkerCannotOpenIsNamedWithRankAndHost) {
  const std::string store = p("unwritable.h5");
  const std::string shard = store + ".rank2.h5";
  fs::create_directories(shard);
  CliRun r = mpirun3(warmup(store));
  EXPECT_NE(r.code, 0) << r.err;
  const std::regex line("hypic: error: worker rank 2 \\(pid [0-9]+ on " + cli_test::host_name() +
                        "\\) cannot write its shard: [^\n]*" + shard +
                        "[^\n]*; make the shard writable");
  EXPECT_TRUE(std::regex_search(r.err, line)) << r.err;
  EXPECT_EQ(cli_test::error_lines(r.err), 1u) << r.err;
  fs::remove(shard);
  r = mpirun3(warmup(store));
  ASSERT_EQ(r.code, 0) << r.err;
  cli_test::expect_same_store(store, p("reference.h5"));
}

TEST_F(ShardWritersCli, WritersRank0KeepsTheSingleWriter) {
  const std::string store = p("single.h5");
  CliRun r = mpirun3(warmup(store) + " --writers rank0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("1 planner and writer, 2 workers"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(store + ".shards.json"));
  EXPECT_FALSE(fs::exists(store + ".rank1.h5"));
  cli_test::expect_same_store(store, p("reference.h5"));
  r = hypic(warmup(p("x.h5")) + " --writers some");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--writers"), std::string::npos) << r.err;
}

// Workers choose the entries' forms for --dtype (they never see the store); fp8 forms cannot
// live in an existing f16 store, so rank 0 stops with one line naming the dtype to rerun with,
// and the store keeps what it had (issue #47, docs/entry-forms.md).
TEST_F(ShardWritersCli, Fp8FormsForAnF16StoreAreRefused) {
  const std::string store = p("f16.h5");
  {
    std::ifstream all(dir_ / "corpus.jsonl");
    std::string first;
    std::getline(all, first);
    std::ofstream one(dir_ / "one.jsonl");
    one << first << "\n";
  }
  CliRun r = hypic("warmup " + model_arg() + " --corpus " + p("one.jsonl") + " --store " + store +
                   " --dtype f16");
  ASSERT_EQ(r.code, 0) << r.err;
  r = mpirun3(warmup(store) + " --writers rank0 --entry-tolerance 0.5");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("holds fp8 forms, which a f16 store cannot keep; rerun with --dtype f16"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(SegmentStore::open_any(store, OpenMode::kRead).size(), 1u);
  r = mpirun3(warmup(store) + " --writers rank0 --entry-tolerance 0.5 --dtype f16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(SegmentStore::open_any(store, OpenMode::kRead).size(), static_cast<uint64_t>(kDocs));
}

}  // namespace shard_writers_cli_test
}  // namespace
