// `hypic chat` driven through a pipe (stdin not a terminal: no prompts) on a tiny random
// model: documents from typed text, a file and a folder, list, ask over all and chosen
// documents, a mode switch, and the cache statistics printed with every answer.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {
namespace chat_cli_test {
namespace fs = std::filesystem;

using cli_test::CliRun;
using cli_test::slurp;

class ChatCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_chat_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "docs");
    ASSERT_EQ(std::system((std::string(HYPIC_BINARY) +
                           " model init --arch qwen3_5 --preset tiny --seed 9 --out " +
                           (dir_ / "model").string() + " > /dev/null")
                              .c_str()),
              0);
    std::ofstream(dir_ / "lamp.txt") << "The Esker lamp was designed by Ilse Maren in 1871.\n";
    std::ofstream(dir_ / "docs" / "a.txt") << "Tolvik lies on the Lenne.\n";
    std::ofstream(dir_ / "docs" / "b.txt") << "Brask is the capital of the Northern Province.\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun chat(const std::string& args, const std::string& script) {
    std::ofstream(dir_ / "script.txt") << script;
    return cli_test::run_shell(dir_, "cat " + (dir_ / "script.txt").string() + " | " +
                                         HYPIC_BINARY + " chat --byte-tokenizer --model " +
                                         (dir_ / "model").string() + " " + args);
  }

  static std::vector<std::string> lines_starting(const std::string& text, const std::string& head) {
    std::vector<std::string> v;
    std::stringstream ss(text);
    std::string l;
    while (std::getline(ss, l))
      if (l.rfind(head, 0) == 0) v.push_back(l);
    return v;
  }
};
fs::path ChatCli::dir_;

TEST_F(ChatCli, ScriptedSessionReusesCachedDocuments) {
  const std::string script =
      "add-text Varnholm was founded in 1622 by salt traders.\n"
      "add " +
      (dir_ / "lamp.txt").string() +
      "\n"
      "list\n"
      "ask Who designed the lamp?\n"
      "mode pic-addition\n"
      "ask Who designed the lamp?\n"
      "ask-on lamp Who designed it?\n"
      "frobnicate\n"
      "quit\n"
      "ask never reached\n";
  const CliRun r = chat("--store " + (dir_ / "store.h5").string() + " --max-new-tokens 3", script);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("hypic>"), std::string::npos) << r.out;  // no prompts from a pipe
  EXPECT_NE(r.out.find("added t1 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("added lamp ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 documents\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mode pic-addition"), std::string::npos) << r.out;
  EXPECT_EQ(lines_starting(r.out, "answer: ").size(), 3u) << r.out;
  const std::vector<std::string> stats = lines_starting(r.out, "stats: ");
  ASSERT_EQ(stats.size(), 3u) << r.out;
  EXPECT_TRUE(std::regex_search(stats[0], std::regex(R"(ttft [0-9.]+ ms)"))) << stats[0];
  EXPECT_NE(stats[0].find("hits 0 (memory 0, store 0) | colds 2 | 2 documents"), std::string::npos)
      << stats[0];
  EXPECT_NE(stats[0].find("mode pic, junction 8"), std::string::npos) << stats[0];
  // pic-addition reads the entries the first question stored.
  EXPECT_NE(stats[1].find("hits 2 (memory 0, store 2) | colds 0"), std::string::npos) << stats[1];
  EXPECT_NE(stats[1].find("mode pic-addition"), std::string::npos) << stats[1];
  EXPECT_NE(stats[2].find("hits 1 (memory 1, store 0) | colds 0 | 1 document,"), std::string::npos)
      << stats[2];
  EXPECT_NE(r.err.find("chat: error: unknown command 'frobnicate'"), std::string::npos) << r.err;
}

TEST_F(ChatCli, FoldersTypedBlocksAndModes) {
  const std::string script =
      "help\n"
      "add " +
      (dir_ / "docs").string() +
      "\n"
      "add-text\n"
      "First line of a typed note.\n"
      "Second line.\n"
      ".\n"
      "list\n"
      "ask-on a,missing Where?\n"
      "mode full\n"
      "ask Where is Tolvik?\n"
      "mode pic\n"
      "junction 4\n"
      "ask-on a,t1 Where is Tolvik?\n"
      "ask-on t1,a Where is Tolvik?\n";  // ends at end of input, without quit
  const CliRun r = chat("--max-new-tokens 2", script);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ask-on ID,ID QUESTION"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("added a ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("added b ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("added t1 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 documents\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("First line of a typed note.\\nSecond line."), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no document 'missing'"), std::string::npos) << r.err;
  const std::vector<std::string> stats = lines_starting(r.out, "stats: ");
  ASSERT_EQ(stats.size(), 3u) << r.out;
  EXPECT_NE(stats[0].find("hits 0 (memory 0, store 0) | colds 0 | 3 documents"), std::string::npos)
      << stats[0];
  EXPECT_NE(stats[0].find("mode full"), std::string::npos) << stats[0];
  EXPECT_NE(stats[1].find("colds 2"), std::string::npos) << stats[1];
  EXPECT_NE(stats[1].find("junction 4"), std::string::npos) << stats[1];
  // The same documents in the other order: position-independent reuse.
  EXPECT_NE(stats[2].find("hits 2 (memory 2, store 0) | colds 0"), std::string::npos) << stats[2];
}

TEST_F(ChatCli, NoRepeatNgramReachesEveryAnswer) {
  // The random model loops; --no-repeat-ngram 1 forbids any token twice in an answer. With
  // the byte tokenizer each ASCII character is one token (bytes above 127 print as U+FFFD,
  // and a line break as "\\n", so only letters other than n and digits are counted).
  const std::string script =
      "add-text Varnholm was founded in 1622 by salt traders.\n"
      "ask Who founded it?\n"
      "ask-on t1 Who founded it?\n";
  const CliRun plain = chat("--max-new-tokens 24", script);
  const CliRun banned = chat("--max-new-tokens 24 --no-repeat-ngram 1", script);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(banned.code, 0) << banned.err;
  const std::vector<std::string> a0 = lines_starting(plain.out, "answer: ");
  const std::vector<std::string> a1 = lines_starting(banned.out, "answer: ");
  ASSERT_EQ(a0.size(), 2u) << plain.out;
  ASSERT_EQ(a1.size(), 2u) << banned.out;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NE(a0[i], a1[i]) << "the rule changed nothing: " << a0[i];
    int seen[128] = {};
    for (char c : a1[i].substr(8))
      if (std::isalnum(static_cast<unsigned char>(c)) && c != 'n') {
        EXPECT_EQ(++seen[static_cast<int>(c)], 1) << "'" << c << "' twice in " << a1[i];
      }
  }
  const CliRun bad = chat("--no-repeat-ngram -2", script);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--no-repeat-ngram must be 0 (off) or a size"), std::string::npos)
      << bad.err;
}

}  // namespace chat_cli_test
}  // namespace
