#pragma once
// Shared helpers for tests that run the built `hypic` binary (HYPIC_BINARY) as a user would
// and check its exit code, stdout and stderr.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

#include "store/segment_store.hpp"

namespace cli_test {

// Writes a JSONL corpus of `docs` documents "doc0", "doc1", ... of random token ids in
// [0, 511] (a tiny model's vocabulary), each of a length drawn from [min_len, max_len], from an
// mt19937 seeded with `seed`; returns the documents' tokens. The CLI tests' common set-up.
inline std::vector<std::vector<int>> write_random_corpus(const std::filesystem::path& path,
                                                         int docs, unsigned seed, int min_len,
                                                         int max_len) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(0, 511), len(min_len, max_len);
  std::ofstream corpus(path);
  std::vector<std::vector<int>> out;
  for (int d = 0; d < docs; ++d) {
    std::vector<int> t(static_cast<size_t>(len(rng)));
    for (int& x : t) x = tok(rng);
    corpus << nlohmann::json({{"id", "doc" + std::to_string(d)}, {"tokens", t}}).dump() << "\n";
    out.push_back(std::move(t));
  }
  EXPECT_TRUE(corpus.good()) << "cannot write " << path;
  return out;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Kills (SIGKILL) the background process whose PID is in `pid_file` when the scope ends,
// unless it has ended: a test that fails an assertion half-way must not leave a job it
// started running. Only this test's own processes, by PID.
class KillOnExit {
 public:
  explicit KillOnExit(std::filesystem::path pid_file) : pid_file_(std::move(pid_file)) {}
  KillOnExit(const KillOnExit&) = delete;
  KillOnExit& operator=(const KillOnExit&) = delete;
  ~KillOnExit() {
    const std::string text = slurp(pid_file_);
    const long pid = std::strtol(text.c_str(), nullptr, 10);
    if (pid > 1 && ::kill(static_cast<pid_t>(pid), 0) == 0)
      ::kill(static_cast<pid_t>(pid), SIGKILL);
  }

 private:
  std::filesystem::path pid_file_;
};

struct CliRun {
  int code;
  std::string out, err;
};

// Runs a shell command with stdout and stderr captured through files in `dir`.
inline CliRun run_shell(const std::filesystem::path& dir, const std::string& command) {
  const std::filesystem::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = command + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {status, slurp(out), slurp(err)};
}

// Runs `hypic ARGS`.
inline CliRun run_hypic(const std::filesystem::path& dir, const std::string& args) {
  return run_shell(dir, std::string(HYPIC_BINARY) + " " + args);
}

// A refused input: non-zero exit and exactly one stderr line, "hypic: error: ...needle...".
inline void expect_one_line_error(const CliRun& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("hypic: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// This machine's host name, as a worker's error line names it.
inline std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// How many times "hypic: error:" stands in `err` (under mpirun other lines may surround it).
inline size_t error_lines(const std::string& err) {
  size_t n = 0;
  for (size_t at = err.find("hypic: error:"); at != std::string::npos;
       at = err.find("hypic: error:", at + 1))
    ++n;
  return n;
}

// Both stores hold the same keys with bit-identical entries (row order may differ).
inline void expect_same_store(const std::string& a_path, const std::string& b_path) {
  using hypic::store::OpenMode;
  using hypic::store::SegmentStore;
  SegmentStore a = SegmentStore::open_any(a_path, OpenMode::kRead);
  SegmentStore b = SegmentStore::open_any(b_path, OpenMode::kRead);
  EXPECT_EQ(a.model_fingerprint(), b.model_fingerprint());
  EXPECT_EQ(a.junction(), b.junction());
  EXPECT_EQ(a.dtype(), b.dtype());
  std::vector<std::string> ka = a.keys(), kb = b.keys();
  std::sort(ka.begin(), ka.end());
  std::sort(kb.begin(), kb.end());
  ASSERT_EQ(ka, kb);
  for (const std::string& k : ka) {
    const auto ea = a.get(k), eb = b.get(k);
    ASSERT_TRUE(ea && eb) << k;
    EXPECT_EQ(ea->n_tokens, eb->n_tokens) << k;
    ASSERT_EQ(ea->arrays.size(), eb->arrays.size()) << k;
    for (const auto& [name, t] : ea->arrays) {
      ASSERT_TRUE(eb->arrays.count(name)) << k << " " << name;
      const std::vector<float> va = t.to_vector();
      const std::vector<float> vb = eb->arrays.at(name).to_vector();
      ASSERT_EQ(va.size(), vb.size()) << k << " " << name;
      EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0)
          << k << " " << name;
    }
  }
}

// The test binary is itself a singleton MPI process, and Open MPI's singleton start puts
// OMPI_*, PMIX_*, ORTE_* and OPAL_* variables into its environment: a child mpirun that
// inherited them would try to join this process's runtime. `env -u` drops them.
inline std::string clean_mpi_environment() {
  std::string prefix = "env";
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    const std::string name = var.substr(0, var.find('='));
    for (const char* p : {"OMPI_", "PMIX_", "ORTE_", "OPAL_"})
      if (name.rfind(p, 0) == 0) prefix += " -u " + name;
  }
  return prefix +
         " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1";
}

}  // namespace cli_test
