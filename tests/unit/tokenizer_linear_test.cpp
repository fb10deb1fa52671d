// The pre-tokenizer and BPE stay linear in the input and off the thread's stack (issue #50):
// Kimi's tiktoken pipeline took 1.2 s for 20k spaces and 7 s for 100k (its merge loop rescanned
// the piece after every merge), and PCRE2's JIT ran out of its 32 kB stack on a word of 8,000
// letters ("JIT stack limit reached"). A 1 M-space text and 100k-letter words now encode, with
// the pieces tiktoken's algorithm gives. No timing is asserted; the test ends in about a second.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"

namespace {
namespace tokenizer_linear_test {
namespace fs = std::filesystem;
using hypic::model::Tokenizer;

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (unsigned char)bytes[i] << 16 | (unsigned char)bytes[i + 1] << 8 |
                       (unsigned char)bytes[i + 2];
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], k[v & 63]};
  }
  if (bytes.size() - i == 1) {
    const unsigned v = (unsigned char)bytes[i] << 16;
    out += {k[v >> 18], k[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    const unsigned v = (unsigned char)bytes[i] << 16 | (unsigned char)bytes[i + 1] << 8;
    out += {k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63], '='};
  }
  return out;
}

// A tiktoken.model of the 256 bytes (rank = byte value) and four merged tokens: "  " (256),
// "    " (257), "aa" (258), "aaaa" (259).
class TokenizerLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hypic_tok_linear_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream out(dir_ / "tiktoken.model", std::ios::binary);
    int rank = 0;
    for (int b = 0; b < 256; ++b) out << base64(std::string(1, char(b))) << ' ' << rank++ << '\n';
    for (const char* t : {"  ", "    ", "aa", "aaaa"}) out << base64(t) << ' ' << rank++ << '\n';
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TokenizerLinear, MillionSpacesMergeInPairsOfPairs) {
  const Tokenizer tok = Tokenizer::for_model(dir_.string());
  // One piece (`\s+(?!\S)` at the end of the text); every "  " first (rank 256, leftmost
  // first), then "    " from two of them (rank 257).
  EXPECT_EQ(tok.encode(std::string(1000000, ' ')), std::vector<int32_t>(250000, 257));
  // Before a word the run keeps its last space for the word (" x", then bytes).
  const std::vector<int32_t> ids = tok.encode(std::string(1000001, ' ') + "x");
  ASSERT_EQ(ids.size(), 250002u);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end() - 2), std::vector<int32_t>(250000, 257));
  EXPECT_EQ(ids[250000], int32_t(' '));
  EXPECT_EQ(ids[250001], int32_t('x'));
}

TEST_F(TokenizerLinear, HundredThousandLetterWordsNeedNoThreadStack) {
  const Tokenizer tok = Tokenizer::for_model(dir_.string());
  // Lower case: one piece of Kimi's second branch; merged into "aaaa" tokens.
  EXPECT_EQ(tok.encode(std::string(100000, 'a')), std::vector<int32_t>(25000, 259));
  // Upper case: the second branch backtracks over the whole word before the third takes it.
  EXPECT_EQ(tok.encode(std::string(100000, 'A')), std::vector<int32_t>(100000, int32_t('A')));
  // A word, a space run, a word: "a"x40000 | 7 spaces (`\s+(?!\S)` leaves the last one) | " aa".
  const std::string text = std::string(40000, 'a') + std::string(8, ' ') + "aa";
  std::vector<int32_t> want(10000, 259);
  want.insert(want.end(), {257, 256, int32_t(' '), int32_t(' '), 258});
  EXPECT_EQ(tok.encode(text), want);
  EXPECT_EQ(tok.decode(want), text);
}

}  // namespace tokenizer_linear_test
}  // namespace
