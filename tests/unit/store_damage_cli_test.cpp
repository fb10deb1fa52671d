// Damaged store files through the built binary (issue #17, "Hangs"): each damage is applied to
// a copy of a warmed store, then `hypic inspect --store COPY --verify` and `hypic serve --store
// COPY` run under a time bound. Each must end within the bound with one `hypic: error:` line
// naming the file; the commands that only read the store leave the copy byte for byte as it
// was, and so does a writer that refuses the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {
namespace store_damage_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;

// A command still running after this many seconds is killed and counts as a hang.
constexpr int kBoundSeconds = 20;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

class StoreDamageCli : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::string pristine_;     // the warmed store's bytes
  static constexpr int kDocs = 24;  // a store of more than 1 MiB

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_store_damage_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 3 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
    cli_test::write_random_corpus(dir_ / "corpus.jsonl", kDocs, 7, 30, 90);
    std::ofstream(dir_ / "queries.jsonl")
        << R"({"id": "q1", "segments": ["doc0", "doc1"], "question_tokens": [5, 6], "max_new_tokens": 2})"
           "\n";
    // Dense entries (--entry-tolerance 0): the damage cases need a store past 1 MiB.
    r = hypic("warmup --model " + p("model") + " --corpus " + p("corpus.jsonl") + " --store " +
              p("store.h5") + " --entry-tolerance 0");
    ASSERT_EQ(r.code, 0) << r.err;
    pristine_ = read_bytes(dir_ / "store.h5");
    ASSERT_GT(pristine_.size(), size_t{1} << 20);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  // `hypic ARGS` killed with SIGKILL after kBoundSeconds; `seconds` is how long it ran.
  static CliRun bounded(const std::string& args, double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    CliRun r = cli_test::run_shell(
        dir_, "timeout -s KILL " + std::to_string(kBoundSeconds) + " " + HYPIC_BINARY + " " + args);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  static std::string p(const std::string& name) { return (dir_ / name).string(); }

  struct Damage {
    std::string name;
    std::string bytes;  // the damaged file
  };
  static std::vector<Damage> damages() {
    std::vector<Damage> out;
    // Superblock end-of-file address, root group address, superblock checksum.
    for (size_t at : {28u, 36u, 44u}) {
      std::string b = pristine_;
      b[at] = static_cast<char>(b[at] ^ 0xff);
      out.push_back({"byte " + std::to_string(at) + " flipped", b});
    }
    for (size_t size : {size_t{100}, size_t{6344}, size_t{1} << 20, pristine_.size() / 2}) {
      if (size >= pristine_.size()) continue;
      out.push_back({"truncated at " + std::to_string(size), pristine_.substr(0, size)});
    }
    return out;
  }

  // Ended in time, failed, one line that names the file.
  static void expect_bounded_one_line_error(const CliRun& r, double seconds,
                                            const std::string& file, const std::string& what) {
    EXPECT_LT(seconds, kBoundSeconds - 1) << what << ": still running after the bound";
    EXPECT_NE(r.code, 0) << what;
    EXPECT_EQ(r.err.rfind("hypic: error: ", 0), 0u) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << what << ": " << r.err;
  }
};
fs::path StoreDamageCli::dir_;
std::string StoreDamageCli::pristine_;

TEST_F(StoreDamageCli, InspectVerifyEndsWithOneLineAndLeavesTheFileAsItWas) {
  for (const Damage& d : damages()) {
    const fs::path copy = dir_ / "damaged.h5";
    write_bytes(copy, d.bytes);
    double seconds = 0;
    const CliRun r = bounded("inspect --store " + copy.string() + " --verify", &seconds);
    expect_bounded_one_line_error(r, seconds, copy.string(), d.name);
    EXPECT_EQ(fs::file_size(copy), d.bytes.size()) << d.name << ": the reader changed the size";
    EXPECT_TRUE(read_bytes(copy) == d.bytes) << d.name << ": the reader changed the file";
    if (d.name.rfind("truncated", 0) == 0) {
      EXPECT_NE(r.err.find("truncated"), std::string::npos) << d.name << ": " << r.err;
    }
  }
  // The store the copies came from is untouched and verifies.
  EXPECT_TRUE(read_bytes(dir_ / "store.h5") == pristine_);
  const CliRun r = hypic("inspect --store " + p("store.h5") + " --verify");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(kDocs) + " valid, 0 damaged"), std::string::npos) << r.out;
}

TEST_F(StoreDamageCli, ServeEndsWithOneLineAndLeavesARefusedFileAsItWas) {
  int refused = 0;
  for (const Damage& d : damages()) {
    const fs::path copy = dir_ / "damaged-serve.h5";
    write_bytes(copy, d.bytes);
    double seconds = 0;
    const CliRun r = bounded("serve --model " + p("model") + " --corpus " + p("corpus.jsonl") +
                                 " --queries " + p("queries.jsonl") + " --mode pic --out " +
                                 p("serve-out") + " --store " + copy.string(),
                             &seconds);
    const bool truncated = d.name.rfind("truncated", 0) == 0;
    if (r.code == 0 && truncated) {
      // serve writes to its store: a cut that spared the committed metadata is the one a
      // full disk leaves, and is repaired (the entries it uses are recomputed). Checking the
      // rest ends in time, naming any entry still damaged.
      EXPECT_LT(seconds, kBoundSeconds - 1) << d.name;
      const CliRun v = bounded("inspect --store " + copy.string() + " --verify", &seconds);
      EXPECT_LT(seconds, kBoundSeconds - 1) << d.name;
      if (v.code != 0) expect_bounded_one_line_error(v, seconds, copy.string(), d.name);
      continue;
    }
    ++refused;
    expect_bounded_one_line_error(r, seconds, copy.string(), d.name);
    EXPECT_TRUE(read_bytes(copy) == d.bytes) << d.name << ": a refused store was changed";
    if (truncated) {
      EXPECT_NE(r.err.find("truncated"), std::string::npos) << d.name << ": " << r.err;
    }
  }
  EXPECT_GE(refused, 5);  // the three superblock fields and the cuts at 100 B and 6,344 B
  EXPECT_TRUE(read_bytes(dir_ / "store.h5") == pristine_);
}

}  // namespace store_damage_cli_test
}  // namespace
