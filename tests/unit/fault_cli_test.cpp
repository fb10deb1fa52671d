// A worker rank killed with SIGKILL during `mpirun -n 3 hypic warmup` and `... serve`: the job
// ends with one line naming the rank and the segment it held, the store verifies, and a rerun
// resumes to the store a single process writes (docs/cluster.md, "A worker that dies").
// The test starts mpirun itself (MPIEXEC), finds the worker's PID from the line
// HYPIC_DEBUG_WORKER_DELAY_MS makes each worker print, and kills that PID only.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "store/segment_store.hpp"

namespace {
namespace fault_cli_test {
namespace fs = std::filesystem;
using cli_test::clean_mpi_environment;
using cli_test::CliRun;
using cli_test::slurp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

class FaultCli : public ::testing::Test {
 protected:
  static fs::path dir_;
  static constexpr int kDocs = 40;
  static std::vector<std::vector<int>> docs_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_fault_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 3 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
    docs_ = cli_test::write_random_corpus(dir_ / "corpus.jsonl", kDocs, 11, 20, 60);
    // The reference: one process, the whole corpus.
    r = hypic("warmup " + model_arg() + " --corpus " + p("corpus.jsonl") + " --store " +
              p("reference.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  static std::string model_arg() { return "--model " + p("model"); }
  static std::string p(const std::string& name) { return (dir_ / name).string(); }

  // `mpirun -n 3 hypic ARGS`, run to the end.
  static CliRun mpirun3(const std::string& args) {
    return cli_test::run_shell(dir_, clean_mpi_environment() + " " + HYPIC_MPIEXEC +
                                         " -n 3 --oversubscribe " + HYPIC_BINARY + " " + args);
  }

  // A job started in the background: mpirun's PID, its output files and its exit code.
  struct Job {
    std::string name;
    std::string err() const { return slurp(dir_ / (name + ".err")); }
    std::string out() const { return slurp(dir_ / (name + ".out")); }
    std::optional<int> exit_code() const {
      const fs::path rc = dir_ / (name + ".rc");
      const std::string s = slurp(rc);
      if (s.empty() || s.back() != '\n') return std::nullopt;
      return std::stoi(s);
    }
    pid_t mpirun_pid() const {
      return static_cast<pid_t>(std::stol(slurp(dir_ / (name + ".pid"))));
    }
  };
  static Job start_mpirun3(const std::string& name, const std::string& args, int delay_ms) {
    const std::string base = p(name);
    const std::string cmd = "( " + clean_mpi_environment() +
                            " HYPIC_DEBUG_WORKER_DELAY_MS=" + std::to_string(delay_ms) + " " +
                            HYPIC_MPIEXEC + " -n 3 --oversubscribe " + HYPIC_BINARY + " " + args +
                            " > " + base + ".out 2> " + base + ".err & echo $! > " + base +
                            ".pid; wait $!; echo $? > " + base + ".rc.tmp; mv " + base +
                            ".rc.tmp " + base + ".rc ) > /dev/null 2>&1 &";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    return Job{name};
  }

  // Waits until `ready(job)` or the job ends or `seconds` pass; true when ready.
  template <class Ready>
  static bool wait_for(const Job& job, double seconds, Ready ready) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
      if (ready(job)) return true;
      if (job.exit_code()) return ready(job);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Waits for the job to end; on timeout kills mpirun (which ends its ranks) and fails.
  static int finish(const Job& job, double seconds) {
    if (!wait_for(job, seconds, [](const Job& j) { return j.exit_code().has_value(); })) {
      kill(job.mpirun_pid(), SIGKILL);
      ADD_FAILURE() << job.name << " did not end within " << seconds << " s:\n" << job.err();
      return -1;
    }
    return *job.exit_code();
  }

  // The PID worker `rank` printed (HYPIC_DEBUG_WORKER_DELAY_MS), or 0.
  static pid_t worker_pid(const Job& job, int rank) {
    const std::string err = job.err();
    std::smatch m;
    const std::regex re("hypic: debug: worker rank " + std::to_string(rank) + " pid (\\d+)");
    return std::regex_search(err, m, re) ? static_cast<pid_t>(std::stol(m[1])) : 0;
  }

  static int entries_done(const Job& job) {
    const std::string err = job.err();
    const std::regex progress(R"(warmup: (\d+)/)");
    int done = 0;
    for (std::sregex_iterator it(err.begin(), err.end(), progress), end; it != end; ++it)
      done = std::max(done, std::stoi((*it)[1]));
    return done;
  }

  static int count(const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
      ++n;
    return n;
  }
};
fs::path FaultCli::dir_;
std::vector<std::vector<int>> FaultCli::docs_;

TEST_F(FaultCli, KilledWorkerDuringWarmupIsNamedWithItsSegmentAndTheRerunResumes) {
  const std::string store = p("warm.h5");
  const std::string args =
      "warmup " + model_arg() + " --corpus " + p("corpus.jsonl") + " --store " + store;
  // Each worker sleeps 200 ms before each of its ~20 segments: about 4 s of work.
  const Job job = start_mpirun3("warm", args, 200);
  const cli_test::KillOnExit guard(p("warm.pid"));
  ASSERT_TRUE(wait_for(job, 40, [](const Job& j) {
    return worker_pid(j, 2) > 0 && entries_done(j) >= 4;
  })) << job.err();
  const pid_t victim = worker_pid(job, 2);
  ASSERT_FALSE(job.exit_code()) << "the warm-up ended before the kill:\n" << job.err();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = finish(job, 30);
  const std::string err = job.err();
  EXPECT_NE(code, 0) << err;
  EXPECT_EQ(job.out().find("warmup: 40 entries"), std::string::npos) << job.out();

  // One line from hypic, naming the rank, its PID and the segment it held.
  EXPECT_EQ(count(err, "hypic: error:"), 1) << err;
  std::smatch m;
  const std::regex named("hypic: error: worker rank 2 \\(pid " + std::to_string(victim) +
                         " on [^)]+\\) died while computing segment (\\d+) \\(document "
                         "\"doc(\\d+)\", (\\d+) tokens, key ([0-9a-f]+)\\)[^\\n]*the store " +
                         store + " keeps every entry committed so far");
  ASSERT_TRUE(std::regex_search(err, m, named)) << err;
  const int segment = std::stoi(m[1]);
  EXPECT_EQ(std::stoi(m[2]), segment);
  ASSERT_GE(segment, 0);
  ASSERT_LT(segment, kDocs);
  EXPECT_EQ(std::stoi(m[3]), static_cast<int>(docs_[static_cast<size_t>(segment)].size()));

  // The store verifies; the segment the dead rank held is not in it (its entry never came).
  CliRun r = hypic("inspect --store " + store + " --verify");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::smatch e;
  ASSERT_TRUE(std::regex_search(r.out, e, std::regex(R"(entries\s+(\d+))"))) << r.out;
  const int stored = std::stoi(e[1]);
  EXPECT_GE(stored, 4);
  EXPECT_LT(stored, kDocs);
  {
    auto st = hypic::store::SegmentStore::open_any(store, hypic::store::OpenMode::kRead);
    const auto& d = docs_[static_cast<size_t>(segment)];
    const std::string key = st.key_for(std::vector<int32_t>(d.begin(), d.end()));
    EXPECT_EQ(key, std::string(m[4]));
    EXPECT_FALSE(st.contains(key)) << "segment " << segment;
  }

  // The rerun (3 ranks, no delay) computes only what is missing, and the result is the store
  // one process writes.
  r = mpirun3(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(kDocs - stored) + " computed, " + std::to_string(stored) +
                       " already in the store"),
            std::string::npos)
      << r.out;
  r = hypic("inspect --store " + store + " --verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  cli_test::expect_same_store(store, p("reference.h5"));
}

TEST_F(FaultCli, KilledWorkerDuringServeIsNamedWithItsSegmentAndTheRerunCompletes) {
  // Six queries of six documents each, every segment cold: the workers compute them all.
  std::ofstream q(dir_ / "queries.jsonl");
  for (int i = 0; i < 6; ++i) {
    json segments = json::array();
    for (int s = 0; s < 6; ++s) segments.push_back("doc" + std::to_string(i * 6 + s));
    q << json({{"id", "q" + std::to_string(i)},
               {"segments", segments},
               {"question_tokens", {1, 2, 3}},
               {"max_new_tokens", 2}})
             .dump()
      << "\n";
  }
  q.close();
  const std::string store = p("serve.h5");
  const std::string args = "serve " + model_arg() + " --corpus " + p("corpus.jsonl") +
                           " --queries " + p("queries.jsonl") + " --store " + store + " --out " +
                           p("serve-out");
  const fs::path predictions = dir_ / "serve-out" / "predictions.jsonl";
  const Job job = start_mpirun3("serve", args, 200);
  const cli_test::KillOnExit guard(p("serve.pid"));
  // Kill worker 2 once the first query is answered: it then holds the next query's segments.
  ASSERT_TRUE(wait_for(job, 40, [&](const Job& j) {
    return worker_pid(j, 2) > 0 && count(slurp(predictions), "\n") >= 1;
  })) << job.err();
  ASSERT_FALSE(job.exit_code()) << "serve ended before the kill:\n" << job.err();
  const pid_t victim = worker_pid(job, 2);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = finish(job, 30);
  const std::string err = job.err();
  EXPECT_NE(code, 0) << err;
  EXPECT_LT(count(slurp(predictions), "\n"), 6);
  EXPECT_EQ(count(err, "hypic: error:"), 1) << err;
  const std::regex named("hypic: error: worker rank 2 \\(pid " + std::to_string(victim) +
                         " on [^)]+\\) died while computing segment \\d+ \\(of query \"q[1-5]\", "
                         "\\d+ tokens, key [0-9a-f]+\\)[^\\n]*the store " +
                         store + " keeps the cold entries written so far");
  EXPECT_TRUE(std::regex_search(err, named)) << err;

  CliRun r = hypic("inspect --store " + store + " --verify");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  r = mpirun3(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count(slurp(predictions), "\n"), 6);
  r = hypic("inspect --store " + store + " --verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("36 valid, 0 damaged"), std::string::npos) << r.out;
}

}  // namespace fault_cli_test
}  // namespace
