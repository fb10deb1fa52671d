// The chat session as a library piece, without the CLI: commands fed one by one, output
// captured from a temporary file, on the embedded trained model (inputs/models/...).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "eval/chat_session.hpp"
#include "hypic/error.hpp"
#include "model/checkpoint.hpp"
#include "pic/fingerprint.hpp"

namespace {
namespace chat_session_test {
namespace fs = std::filesystem;
const std::string kModelDir =
    std::string(HYPIC_TEST_DATA_DIR) + "/../../inputs/models/qwen3_5-synthqa";

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(ChatSession, AnswersFromCachedDocumentsAndRefusesBadCommands) {
  auto loaded = hypic::model::load_checkpoint(kModelDir);
  const std::string fp = hypic::pic::model_fingerprint(loaded.config, loaded.weights);
  hypic::model::Model model(std::move(loaded.config), std::move(loaded.weights));
  const auto tok = hypic::model::Tokenizer::from_file(kModelDir + "/tokenizer.json");
  const fs::path store =
      fs::temp_directory_path() / ("hypic_chat_session_" + std::to_string(::getpid()) + ".h5");
  fs::remove(store);
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    hypic::eval::ChatOptions o;
    o.store = store.string();
    o.max_new_tokens = 4;
    hypic::eval::ChatSession s(model, fp, tok, o, false, out);
    std::istringstream none;
    EXPECT_TRUE(s.handle("add-text Alice lives in Paris and works as a baker.", none));
    EXPECT_TRUE(s.handle("add-text Bob lives in Rome.", none));
    EXPECT_TRUE(s.handle("ask Where does Alice live?", none));
    EXPECT_TRUE(s.handle("ask-on t1 Where does Alice live?", none));
    EXPECT_THROW(s.handle("ask-on t9 Where?", none), hypic::Error);
    EXPECT_THROW(s.handle("frobnicate", none), hypic::Error);
    EXPECT_FALSE(s.handle("quit", none));
  }
  const std::string text = read_all(out);
  std::fclose(out);
  EXPECT_NE(text.find("added t1 ("), std::string::npos) << text;
  EXPECT_NE(text.find("added t2 ("), std::string::npos) << text;
  EXPECT_NE(text.find("| hits 0 (memory 0, store 0) | colds 2 | 2 documents,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("| hits 1 (memory 1, store 0) | colds 0 | 1 document,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("answer: "), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(store));  // the user's store holds the entries
  fs::remove(store);
}

}  // namespace chat_session_test
}  // namespace
