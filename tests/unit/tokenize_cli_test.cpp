// `hypic tokenize` through the built binary: the ids of tests/data/tokenizer's golden texts
// (from the `tokenizers` library), one piece per line whose concatenation is the text, and
// one-line errors for a missing or doubled input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"

namespace {
namespace tokenize_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using nlohmann::json;

const std::string kTok = std::string(HYPIC_TEST_DATA_DIR) + "/tokenizer/tokenizer.json";

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hypic_tokenize_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  // The golden case whose text is `text`.
  static json golden_case(const std::string& text) {
    std::ifstream in(std::string(HYPIC_TEST_DATA_DIR) + "/tokenizer/golden.json");
    const json golden = json::parse(in);  // kept alive: the loop reads into it
    for (const json& c : golden["cases"])
      if (c["text"] == text) return c;
    return json();
  }
  static std::string id_list(const json& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i)
      s += (i ? ", " : "") + std::to_string(ids[i].get<int>());
    return s + "]\n";
  }
  fs::path dir_;
};

TEST_F(TokenizeCli, IdsOnlyMatchTheReferenceLibrary) {
  for (const std::string text : {"Hello world", "Emoji 🚀🧠🔥 in a row"}) {
    const json c = golden_case(text);
    ASSERT_FALSE(c.is_null()) << text;
    const CliRun r = hypic("tokenize --model " + kTok + " --ids-only --text '" + text + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, id_list(c["ids"])) << text;
  }
}

TEST_F(TokenizeCli, OnePiecePerLineFromAFile) {
  const std::string text = "line one\nline two";
  const json c = golden_case(text);
  ASSERT_FALSE(c.is_null());
  std::ofstream(dir_ / "in.txt") << text;
  const CliRun r = hypic("tokenize --model " + kTok + " --file " + (dir_ / "in.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line, joined;
  size_t n = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(n, c["ids"].size()) << r.out;
    const size_t arrow = line.find(" -> '");
    ASSERT_NE(arrow, std::string::npos) << line;
    EXPECT_EQ(std::stoi(line.substr(0, arrow)), c["ids"][n].get<int>()) << line;
    ASSERT_EQ(line.back(), '\'') << line;
    joined += line.substr(arrow + 5, line.size() - arrow - 6);
    ++n;
  }
  EXPECT_EQ(n, c["ids"].size());
  EXPECT_EQ(joined, "line one\\nline two");  // the newline piece is printed escaped
  EXPECT_NE(r.err.find(std::to_string(n) + " tokens"), std::string::npos) << r.err;
}

TEST_F(TokenizeCli, NeedsExactlyOneInput) {
  cli_test::expect_one_line_error(hypic("tokenize --model " + kTok), "--text or --file");
  const CliRun both = hypic("tokenize --model " + kTok + " --text a --file b");
  EXPECT_NE(both.code, 0);
  EXPECT_EQ(std::count(both.err.begin(), both.err.end(), '\n'), 1) << both.err;
  cli_test::expect_one_line_error(
      hypic("tokenize --model " + kTok + " --file " + (dir_ / "missing.txt").string()),
      "--file " + (dir_ / "missing.txt").string() + ": cannot open");
}

}  // namespace tokenize_cli_test
}  // namespace
