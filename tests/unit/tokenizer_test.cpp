// The tokenizer against golden ids from the Hugging Face `tokenizers` package
// (scripts/golden/make_tokenizer_golden.py): every id, both special-token modes, decoding with and
// without special tokens, lossy decoding of cut characters, the "a b" merges layout, the
// byte-level fallback, refusals, and encode throughput.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/tokenizer.hpp"
#include "model/unicode.hpp"

namespace {
namespace tokenizer_test {

using hypic::model::Tokenizer;
using nlohmann::json;

const std::string kDir = std::string(HYPIC_TEST_DATA_DIR) + "/tokenizer";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const json& golden() {
  static const json g = json::parse(read_file(kDir + "/golden.json"));
  return g;
}

const Tokenizer& qwen_like() {
  static const Tokenizer t = Tokenizer::from_file(kDir + "/tokenizer.json");
  return t;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char buf[8];
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

TEST(Tokenizer, EncodesEveryGoldenTextLikeTokenizers) {
  const Tokenizer& tok = qwen_like();
  EXPECT_EQ(tok.vocab_size(), golden()["vocab_size"].get<int>());
  int n = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: " << show(text);
    EXPECT_EQ(tok.encode(text, /*parse_special=*/false),
              c["ids_special_as_text"].get<std::vector<int32_t>>())
        << "text: " << show(text);
    ++n;
  }
  EXPECT_GE(n, 50);
}

TEST(Tokenizer, DecodesAndRoundTripsEveryGoldenText) {
  const Tokenizer& tok = qwen_like();
  for (const auto& c : golden()["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << show(text);
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), c["decoded_skip_special"].get<std::string>())
        << show(text);
    // The round trip gives the text back in NFC, which is what the normalizer feeds BPE.
    EXPECT_EQ(tok.decode(tok.encode(text)), hypic::unicode::nfc(text)) << show(text);
    EXPECT_EQ(tok.decode(tok.encode(text, false)), hypic::unicode::nfc(text)) << show(text);
  }
}

TEST(Tokenizer, DecodingCutCharactersReplacesThemLikeTokenizers) {
  for (const auto& c : golden()["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(qwen_like().decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(qwen_like().decode(ids), c["python_replace"].get<std::string>());
  }
  // Unknown ids are skipped.
  EXPECT_EQ(qwen_like().decode({-1, 999999}), "");
}

TEST(Tokenizer, SpecialTokensAreRecognisedAndFlagged) {
  const Tokenizer& tok = qwen_like();
  const auto im_start = tok.token_to_id("<|im_start|>");
  const auto think = tok.token_to_id("<think>");
  ASSERT_TRUE(im_start && think);
  EXPECT_TRUE(tok.is_special(*im_start));
  EXPECT_FALSE(tok.is_special(*think));
  EXPECT_EQ(tok.id_to_token(*im_start), "<|im_start|>");
  const auto ids = tok.encode("<|im_start|>hi<think>");
  EXPECT_EQ(ids.front(), *im_start);
  EXPECT_EQ(ids.back(), *think);
  EXPECT_EQ(tok.decode(ids, true), "hi<think>");
}

TEST(Tokenizer, ReadsMergesStoredAsSpaceSeparatedStrings) {
  json j = json::parse(read_file(kDir + "/tokenizer.json"));
  json merges = json::array();
  for (const auto& m : j["model"]["merges"])
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  j["model"]["merges"] = merges;
  const Tokenizer tok = Tokenizer::from_json(j.dump(), "string-merges.json");
  for (const auto& c : golden()["cases"])
    EXPECT_EQ(tok.encode(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>());
}

TEST(Tokenizer, MergeCacheDoesNotChangeResults) {
  const Tokenizer& tok = qwen_like();
  std::string text;
  for (const auto& c : golden()["cases"]) text += c["text"].get<std::string>() + " ";
  const auto first = tok.encode(text);
  tok.clear_cache();
  EXPECT_EQ(tok.encode(text), first);
  EXPECT_EQ(tok.encode(text), first);
}

TEST(Tokenizer, ByteLevelFallbackForModelsWithoutTokenizerJson) {
  const Tokenizer tok = Tokenizer::for_model(std::string(HYPIC_TEST_DATA_DIR) + "/golden/qwen3_5");
  EXPECT_TRUE(tok.is_byte_fallback());
  EXPECT_NE(tok.describe().find("byte-level fallback"), std::string::npos) << tok.describe();
  EXPECT_NE(tok.describe().find("no tokenizer.json"), std::string::npos) << tok.describe();
  const std::string text = "héllo 中 🚀\n";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.vocab_size(), 256);

  const Tokenizer shifted = Tokenizer::byte_level(3);
  EXPECT_EQ(shifted.encode("A"), std::vector<int32_t>{'A' + 3});
  EXPECT_EQ(shifted.decode({'A' + 3, 0, 1}), "A");  // ids below the offset are skipped

  const Tokenizer bpe = Tokenizer::for_model(kDir);
  EXPECT_FALSE(bpe.is_byte_fallback());
  EXPECT_NE(bpe.describe().find("byte-level BPE"), std::string::npos) << bpe.describe();
  EXPECT_NE(bpe.describe().find("NFC"), std::string::npos) << bpe.describe();
}

TEST(Tokenizer, RefusesInvalidUtf8AndUnsupportedFiles) {
  try {
    qwen_like().encode("ok\xC3(");
    FAIL() << "invalid UTF-8 accepted";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 2"), std::string::npos) << e.what();
  }
  json j = json::parse(read_file(kDir + "/tokenizer.json"));
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_THROW(Tokenizer::from_json(j.dump(), "x.json"), hypic::Error);
  j = json::parse(read_file(kDir + "/tokenizer.json"));
  j["model"]["type"] = "WordPiece";
  EXPECT_THROW(Tokenizer::from_json(j.dump(), "x.json"), hypic::Error);
  j = json::parse(read_file(kDir + "/tokenizer.json"));
  j["model"]["merges"].push_back(json::array({"zzz-not-there", "q"}));
  EXPECT_THROW(Tokenizer::from_json(j.dump(), "x.json"), hypic::Error);
  EXPECT_THROW(Tokenizer::from_json("{not json", "x.json"), hypic::Error);
  EXPECT_THROW(Tokenizer::from_file(kDir + "/missing.json"), hypic::Error);
}

// Kimi's tiktoken.model layout (scripts/golden/make_tiktoken_golden.py: a synthetic 956-rank file,
// Kimi's published split pattern and 258 special ids; golden ids from the tiktoken library).
TEST(Tokenizer, KimiTiktokenMatchesTiktoken) {
  const std::string dir = kDir + "/kimi";
  const json g = json::parse(read_file(dir + "/golden.json"));
  const Tokenizer tok = Tokenizer::for_model(dir);
  EXPECT_NE(tok.describe().find("tiktoken BPE"), std::string::npos) << tok.describe();
  const int n = g["ranks"].get<int>();
  EXPECT_EQ(tok.vocab_size(), n + 258);
  EXPECT_EQ(tok.token_to_id("[BOS]"), n);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), n + 2);
  EXPECT_EQ(tok.token_to_id("<|reserved_token_" + std::to_string(n + 5) + "|>"), n + 5);
  EXPECT_TRUE(tok.is_special(n + 2));
  EXPECT_FALSE(tok.is_special(n - 1));
  int checked = 0;
  for (const json& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, true), ids) << show(text);
    EXPECT_EQ(tok.encode(text, false), c["ids_special_as_text"].get<std::vector<int32_t>>())
        << show(text);
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << show(text);
    ++checked;
  }
  EXPECT_EQ(checked, 25);
}

TEST(Tokenizer, KimiTiktokenRefusesMalformedFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hypic_tiktoken_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = read_file(kDir + "/kimi/tiktoken.model");
  auto refused = [&](const std::string& content, const std::string& what) {
    std::ofstream(dir / "tiktoken.model", std::ios::binary) << content;
    try {
      Tokenizer::for_model(dir.string());
      ADD_FAILURE() << "accepted: " << what;
    } catch (const hypic::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("not-base64! 0\n", "expected '<base64 token> <rank>'");
  refused(model.substr(model.find('\n') + 1), "out of order");
  refused("QQ== 0\nQg== x\n", "not an integer");
  refused("QQ== 0\n", "byte 0 has no rank");
  // As tiktoken's loader (Python's base64.b64decode): one character past a multiple of 4 is
  // no whole byte, unpadded and empty tokens are invalid base64.
  refused("Q 0\n", "the token must be valid padded base64");
  refused("QQ 0\n", "the token must be valid padded base64");
  refused(" 0\n", "the token must be valid padded base64");
  refused("QQ=== 0\n", "the token must be valid padded base64");
  fs::remove_all(dir);
}

TEST(Tokenizer, UnexpectedFormsOfAddedTokenFieldsAreRefusedByName) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hypic_added_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tiktoken.model", std::ios::binary)
      << read_file(kDir + "/kimi/tiktoken.model");
  // Kimi's tokenizer_config.json names its special tokens in an object; a list would leave
  // them unnamed ("[BOS]" then encoded as text).
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"added_tokens_decoder": [{"content": "[BOS]"}]})";
  try {
    Tokenizer::for_model(dir.string());
    ADD_FAILURE() << "a list accepted";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("added_tokens_decoder must be an object"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("not a list"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  // tokenizer.json's added_tokens must be a list.
  json j = json::parse(read_file(kDir + "/tokenizer.json"));
  j["added_tokens"] = {{"[BOS]", {{"id", 0}, {"content", "[BOS]"}}}};
  try {
    Tokenizer::from_json(j.dump(), "x.json");
    ADD_FAILURE() << "an object accepted";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.json: added_tokens must be a list"), std::string::npos)
        << e.what();
  }
}

TEST(Tokenizer, NfcMatchesPythonOnCanonicalEquivalents) {
  using hypic::unicode::nfc;
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("\u212B"), "\u00C5");                // singleton decomposition
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");  // canonical reordering
  EXPECT_EQ(nfc("\u1100\u1161\u11A8"), "\uAC01");    // Hangul LVT
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093C");          // composition exclusion
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
}

TEST(Tokenizer, EncodeThroughput) {
  const Tokenizer& tok = qwen_like();
  std::string text;
  for (int rep = 0; text.size() < (1u << 20); ++rep)
    for (const auto& c : golden()["cases"]) text += c["text"].get<std::string>() + " ";
  const double warm = hypic::model::tokenizer_bench_mb_per_s(tok, text, 0.3);
  const double cold = hypic::model::tokenizer_bench_mb_per_s(tok, text, 0.3, true);
  std::printf(
      "[ tokenizer ] encode %.1f MB/s with the merge cache, %.1f MB/s with it emptied per pass "
      "(%zu bytes)\n",
      warm, cold, text.size());
  EXPECT_GT(warm, 0.0);
  EXPECT_GT(cold, 0.0);
}

}  // namespace tokenizer_test
}  // namespace
