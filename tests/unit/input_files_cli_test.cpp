// Issue #50, through the binary: chat's session stores in a private folder (not at the old
// predictable /tmp/hypic_chat_<pid>), user strings kept out of paths, folders / FIFOs /
// devices refused where a file is meant, tokenize without a tokenizer refused, out-of-range
// budgets refused, empty inputs and duplicate query ids said, a read-only or full store
// served from without writing, and an empty file made a store instead of a stub.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_test_util.hpp"
#include "temp_path.hpp"

namespace {
namespace input_files_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::expect_one_line_error;
using cli_test::slurp;

class InputFilesCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_input_files_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_EQ(std::system((std::string(HYPIC_BINARY) +
                           " model init --arch qwen3_5 --preset tiny --seed 5 --out " +
                           (dir_ / "model").string() + " > /dev/null")
                              .c_str()),
              0);
    std::ofstream(dir_ / "corpus.jsonl") << R"({"id": "d0", "tokens": [1, 2, 3, 4, 5, 6]})"
                                         << "\n"
                                         << R"({"id": "d1", "tokens": [7, 8, 9, 10, 11]})"
                                         << "\n";
    std::ofstream(dir_ / "queries.jsonl")
        << R"({"id": "q1", "segments": ["d0", "d1"], "question_tokens": [3], "max_new_tokens": 2})"
        << "\n";
  }
  static void TearDownTestSuite() {
    // Open MPI's runtime daemon may still be removing its session folder inside a TMPDIR these
    // tests gave hypic (bench-tmpdir, chat-tmpdir) when the suite ends: files vanish under
    // remove_all, which then throws. Remove what is left, a few times if need be.
    std::error_code ec;
    for (int attempt = 0; attempt < 50; ++attempt) {
      fs::remove_all(dir_, ec);
      if (!ec) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  static std::string p(const std::string& name) { return (dir_ / name).string(); }
  static std::string model_arg() { return "--byte-tokenizer --model " + p("model"); }
  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  static CliRun shell(const std::string& command) { return cli_test::run_shell(dir_, command); }
};
fs::path InputFilesCli::dir_;

TEST_F(InputFilesCli, ChatSessionStoreIgnoresTheOldPredictablePath) {
  // Another user plants a link at the old path, /tmp/hypic_chat_<pid>, to a folder of theirs
  // (`exec` keeps the shell's pid): chat must not put its store there.
  const fs::path tmp = dir_ / "tmpdir", victim = dir_ / "victim";
  fs::create_directories(tmp);
  fs::create_directories(victim);
  std::ofstream(dir_ / "script.txt") << "add-text Varnholm was founded in 1622.\n"
                                        "ask When was Varnholm founded?\n";
  const CliRun r =
      shell("cat " + p("script.txt") + " | env TMPDIR=" + tmp.string() + " sh -c 'ln -s " +
            victim.string() + " " + tmp.string() + "/hypic_chat_$$ && exec " + HYPIC_BINARY +
            " chat " + model_arg() + " --max-new-tokens 1'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("answer: "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(victim)) << "the store went through the planted link";
  // The private folder (hypic_chat-XXXXXX) was removed at the end; the planted link stays.
  // (Open MPI's own session folder may be left in TMPDIR too.)
  int links = 0;
  for (const auto& e : fs::directory_iterator(tmp)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("hypic_chat", 0) != 0) continue;
    EXPECT_TRUE(fs::is_symlink(e.symlink_status())) << "left behind: " << e.path();
    ++links;
  }
  EXPECT_EQ(links, 1);
}

TEST_F(InputFilesCli, BenchTemporaryStoreIgnoresTheOldPredictablePath) {
  // The old path was $TMPDIR/hypic-bench-ttft-<pid>.h5: a dangling link planted there made
  // the benchmark create its store at the link's target and leave it there.
  const fs::path tmp = dir_ / "bench-tmpdir", victim = dir_ / "bench-victim.h5";
  fs::create_directories(tmp);
  const CliRun r = shell("env TMPDIR=" + tmp.string() + " sh -c 'ln -s " + victim.string() + " " +
                         tmp.string() + "/hypic-bench-ttft-$$.h5 && exec " + HYPIC_BINARY +
                         " bench ttft --preset tiny --segments 2 --segment-tokens 16 --queries 1 "
                         "--question-tokens 4 --modes pic'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(victim)) << "the store went through the planted link";
  int links = 0;
  for (const auto& e : fs::directory_iterator(tmp)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("hypic-bench", 0) != 0) continue;
    EXPECT_TRUE(fs::is_symlink(e.symlink_status())) << "left behind: " << e.path();
    ++links;
  }
  EXPECT_EQ(links, 1);
}

TEST_F(InputFilesCli, ChatAddRefusesDevicesAndFifos) {
  ASSERT_EQ(::mkfifo(p("chat.fifo").c_str(), 0600), 0);
  std::ofstream(dir_ / "script.txt") << "add /dev/zero\nadd " << p("chat.fifo") << "\nlist\n";
  const CliRun r =
      shell("cat " + p("script.txt") + " | timeout 60 " + HYPIC_BINARY + " chat " + model_arg());
  EXPECT_EQ(r.code, 0) << r.err;  // a refused command does not end the session
  EXPECT_NE(r.err.find("chat: error: add /dev/zero is a character device, not a regular file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("is a FIFO (named pipe), not a regular file"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("no documents"), std::string::npos) << r.out;
}

TEST_F(InputFilesCli, EvalDatasetNameCannotLeaveOut) {
  std::ofstream(dir_ / "escape-templates.json") << R"({"../../escape": {}})";
  const CliRun r =
      hypic("eval " + model_arg() + " --dataset ../../escape --input " + p("corpus.jsonl") +
            " --out " + p("eval-out/a/b") + " --templates " + p("escape-templates.json"));
  expect_one_line_error(r, "--dataset '../../escape' is used in a file name");
  EXPECT_FALSE(fs::exists(p("eval-out")));
}

TEST_F(InputFilesCli, FoldersFifosAndDevicesAreNotInputFiles) {
  fs::create_directories(p("a-folder"));
  const std::string serve = "serve " + model_arg() + " --out " + p("serve-out") + " ";
  expect_one_line_error(
      hypic(serve + "--corpus " + p("a-folder") + " --queries " + p("queries.jsonl")),
      "--corpus " + p("a-folder") + " is a folder, not a regular file");
  expect_one_line_error(hypic(serve + "--queries " + p("a-folder")),
                        "--queries " + p("a-folder") + " is a folder");
  expect_one_line_error(hypic(serve + "--corpus /dev/zero --queries " + p("queries.jsonl")),
                        "--corpus /dev/zero is a character device");
  expect_one_line_error(
      hypic("warmup " + model_arg() + " --corpus " + p("a-folder") + " --store " + p("w.h5")),
      "--corpus " + p("a-folder") + " is a folder");
  EXPECT_FALSE(fs::exists(p("serve-out")));
  EXPECT_FALSE(fs::exists(p("w.h5")));
  // A FIFO as a store is refused at once instead of blocking in open(2).
  ASSERT_EQ(::mkfifo(p("store.fifo").c_str(), 0600), 0);
  expect_one_line_error(
      shell(std::string("timeout 60 ") + HYPIC_BINARY + " inspect --store " + p("store.fifo")),
      "segment store " + p("store.fifo") + " is a FIFO (named pipe)");
  expect_one_line_error(shell(std::string("timeout 60 ") + HYPIC_BINARY + " warmup " + model_arg() +
                              " --corpus " + p("corpus.jsonl") + " --store " + p("store.fifo")),
                        "is a FIFO (named pipe), not a regular file");
  expect_one_line_error(hypic("inspect --store " + p("a-folder")), "is a folder");
}

TEST_F(InputFilesCli, TokenizeWithoutATokenizerIsRefusedUnlessAsked) {
  const CliRun r = hypic("tokenize --model " + p("model") + " --text hi");
  expect_one_line_error(r, "has no tokenizer.json");
  EXPECT_NE(r.err.find("--byte-tokenizer"), std::string::npos) << r.err;
  const CliRun bytes =
      hypic("tokenize --byte-tokenizer --ids-only --model " + p("model") + " --text hi");
  EXPECT_EQ(bytes.code, 0) << bytes.err;
  EXPECT_EQ(bytes.out, "[104, 105]\n");
  expect_one_line_error(
      hypic("tokenize --byte-tokenizer --model " + p("model") + " --file /dev/zero"),
      "--file /dev/zero is a character device");
}

TEST_F(InputFilesCli, OutOfRangeMemoryBudgetIsRefused) {
  for (const char* v : {"inf", "1e308", "nan", "-1"}) {
    const CliRun r =
        hypic("serve " + model_arg() + " --queries " + p("queries.jsonl") + " --corpus " +
              p("corpus.jsonl") + " --out " + p("budget-out") + " --memory-budget " + v);
    expect_one_line_error(r, "--memory-budget must be a finite number of MiB");
  }
  EXPECT_FALSE(fs::exists(p("budget-out")));
}

TEST_F(InputFilesCli, EmptyInputsWarnAndDuplicateQueryIdsAreRefused) {
  std::ofstream(dir_ / "empty.jsonl").flush();
  CliRun r = hypic("warmup " + model_arg() + " --corpus " + p("empty.jsonl") + " --store " +
                   p("empty-store.h5"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("hypic: warning: --corpus " + p("empty.jsonl") +
                       " holds no documents (the file is empty)"),
            std::string::npos)
      << r.err;
  r = hypic("serve " + model_arg() + " --queries " + p("empty.jsonl") + " --out " + p("empty-out"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("hypic: warning: --queries " + p("empty.jsonl") +
                       " holds no queries (the file is empty); nothing is answered"),
            std::string::npos)
      << r.err;
  std::ofstream(dir_ / "dup.jsonl")
      << R"({"id": "q1", "segments": ["d0"], "question_tokens": [3], "max_new_tokens": 1})"
      << "\n"
      << R"({"id": "q2", "segments": ["d1"], "question_tokens": [3], "max_new_tokens": 1})"
      << "\n"
      << R"({"id": "q1", "segments": ["d1"], "question_tokens": [4], "max_new_tokens": 1})"
      << "\n";
  r = hypic("serve " + model_arg() + " --corpus " + p("corpus.jsonl") + " --queries " +
            p("dup.jsonl") + " --out " + p("dup-out"));
  expect_one_line_error(r, p("dup.jsonl") + ":3: duplicate query id 'q1' (first on line 1)");
}

TEST_F(InputFilesCli, AnEmptyFileBecomesAStoreAndIsNeverLeftAStub) {
  std::ofstream(dir_ / "zero.h5").flush();
  // Reading an empty file is refused and leaves it as it was.
  expect_one_line_error(hypic("inspect --store " + p("zero.h5")), "is an empty file (0 bytes)");
  EXPECT_EQ(fs::file_size(p("zero.h5")), 0u);
  // Writing makes it a new store.
  CliRun r = hypic("warmup " + model_arg() + " --corpus " + p("corpus.jsonl") + " --store " +
                   p("zero.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = hypic("inspect --verify --store " + p("zero.h5"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("entries        2"), std::string::npos) << r.out;
  std::ofstream(dir_ / "zero-serve.h5").flush();
  r = hypic("serve " + model_arg() + " --corpus " + p("corpus.jsonl") + " --queries " +
            p("queries.jsonl") + " --store " + p("zero-serve.h5") + " --out " + p("zero-out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(hypic("inspect --verify --store " + p("zero-serve.h5")).code, 0);
}

// A tmpfs mounted for the test (root only; skipped where mount is not allowed), unmounted at
// the end.
class TmpfsMount {
 public:
  TmpfsMount(const fs::path& at, const std::string& size) : at_(at) {
    fs::create_directories(at_);
    mounted_ = ::mount("tmpfs", at_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  bool remount_read_only() {
    return ::mount("tmpfs", at_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  fs::path at_;
  bool mounted_ = false;
};

TEST_F(InputFilesCli, ServeFromAReadOnlyStoreWithoutWritingBack) {
  TmpfsMount mnt(dir_ / "ro", "8m");
  if (!mnt.mounted()) GTEST_SKIP() << "mounting a tmpfs is not allowed here";
  const std::string store = p("ro/store.h5");
  std::ofstream(dir_ / "half.jsonl") << R"({"id": "d0", "tokens": [1, 2, 3, 4, 5, 6]})"
                                     << "\n";
  ASSERT_EQ(
      hypic("warmup " + model_arg() + " --corpus " + p("half.jsonl") + " --store " + store).code,
      0);
  const std::string before = slurp(store);
  ASSERT_TRUE(mnt.remount_read_only());
  const CliRun r = hypic("serve " + model_arg() + " --corpus " + p("corpus.jsonl") + " --queries " +
                         p("queries.jsonl") + " --store " + store + " --out " + p("ro-out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("hypic: warning: store " + store +
                       " cannot be written (Read-only file system): serving from its entries"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(slurp(store), before);
  const std::string pred = slurp(p("ro-out/predictions.jsonl"));
  EXPECT_NE(pred.find("\"q1\""), std::string::npos) << pred;
}

TEST_F(InputFilesCli, ServeOnAFullDiskAnswersWithoutCaching) {
  TmpfsMount mnt(dir_ / "full", "4m");
  if (!mnt.mounted()) GTEST_SKIP() << "mounting a tmpfs is not allowed here";
  const std::string store = p("full/store.h5");
  std::ofstream(dir_ / "half.jsonl") << R"({"id": "d0", "tokens": [1, 2, 3, 4, 5, 6]})"
                                     << "\n";
  ASSERT_EQ(
      hypic("warmup " + model_arg() + " --corpus " + p("half.jsonl") + " --store " + store).code,
      0);
  // Fill what is left of the file system.
  shell("dd if=/dev/zero of=" + p("full/filler") + " bs=64k 2>/dev/null");
  std::ofstream(dir_ / "many.jsonl")
      << R"({"id": "a", "segments": ["d0", {"tokens": [20, 21, 22, 23]}], "question_tokens": [3], "max_new_tokens": 1})"
      << "\n"
      << R"({"id": "b", "segments": [{"tokens": [30, 31, 32]}, "d0"], "question_tokens": [3], "max_new_tokens": 1})"
      << "\n";
  const CliRun r = hypic("serve " + model_arg() + " --corpus " + p("corpus.jsonl") + " --queries " +
                         p("many.jsonl") + " --store " + store + " --out " + p("full-out"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("is full"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("answering on without caching new entries"), std::string::npos) << r.err;
  const std::string pred = slurp(p("full-out/predictions.jsonl"));
  EXPECT_EQ(std::count(pred.begin(), pred.end(), '\n'), 2) << pred;
  fs::remove(p("full/filler"));
  const CliRun v = hypic("inspect --verify --store " + store);
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("entries        1"), std::string::npos) << v.out;
}

}  // namespace input_files_cli_test
}  // namespace
