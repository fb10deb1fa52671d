// Silent wrong results refused with one line (issue #17): a NaN weight is named by
// `hypic model check` and its NaN logits end forward/generate/serve; a model folder without
// tokenizer.json refuses text unless --byte-tokenizer; a prompt plus its new tokens past the
// model's context is refused by every command (eval names how many examples it skips); ten
// million ids end with one line saying what is too big.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "cli_test_util.hpp"
#include "model/safetensors.hpp"
#include "temp_path.hpp"

namespace {
namespace model_checks_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::expect_one_line_error;
using test_util::TempDir;

// `hypic ARGS` run inside the test's folder (file names are relative to it).
CliRun in_dir(const TempDir& tmp, const std::string& command) {
  return cli_test::run_shell(tmp.file(""), "cd " + tmp.file("") + " && " + command);
}
CliRun hypic(const TempDir& tmp, const std::string& args) {
  return in_dir(tmp, std::string(HYPIC_BINARY) + " " + args);
}

void init_model(const TempDir& tmp, const std::string& name) {
  const CliRun r =
      hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 4 --out " + tmp.file(name));
  ASSERT_EQ(r.code, 0) << r.err;
}

// Overwrites element `index` of f32 tensor `name` in DIR/model.safetensors with `value`.
void poke_f32(const std::string& dir, const std::string& name, int64_t index, float value) {
  const std::string path = dir + "/model.safetensors";
  uint64_t data_start = 0;
  {
    const hypic::model::SafetensorsFile f(path);
    const hypic::model::TensorInfo& info = f.info(name);
    ASSERT_EQ(info.dtype, hypic::DType::F32);
    std::ifstream in(path, std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);
    data_start = 8 + header + info.begin;
  }
  std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
  io.seekp(static_cast<std::streamoff>(data_start + 4 * static_cast<uint64_t>(index)));
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  io.write(bytes, 4);
  ASSERT_TRUE(io.good());
}

// The name of a tensor in the model's checkpoint that contains `part`.
std::string tensor_named(const std::string& dir, const std::string& part) {
  const hypic::model::SafetensorsFile f(dir + "/model.safetensors");
  for (const auto& [name, info] : f.tensors())
    if (name.find(part) != std::string::npos) return name;
  ADD_FAILURE() << "no tensor containing " << part;
  return "";
}

void write(const TempDir& tmp, const std::string& name, const std::string& text) {
  std::ofstream(tmp.file(name)) << text;
}

void set_context(const std::string& dir, int positions) {
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  (j.contains("text_config") ? j["text_config"] : j)["max_position_embeddings"] = positions;
  std::ofstream(dir + "/config.json") << j.dump(2);
}

std::string id_list(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(i % 100);
  return s + "]";
}

TEST(ModelChecksCli, NonFiniteWeightIsNamedAndItsLogitsAreRefused) {
  TempDir tmp("hypic-model-checks");
  init_model(tmp, "model");
  const std::string model = tmp.file("model");
  CliRun r = hypic(tmp, "model check --model " + model);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("are finite"), std::string::npos) << r.out;

  write(tmp, "ids.json", "[1, 2, 3, 4]");
  r = hypic(tmp, "generate --model " + model + " --input-ids ids.json --max-new-tokens 3");
  ASSERT_EQ(r.code, 0) << r.err;
  // --no-repeat-ngram 1: no id twice among 40 generated (a random model repeats ids without it).
  const auto generated = [](const std::string& out) {  // {ids, distinct ids} of "generated:"
    const size_t at = out.find("generated:");
    std::istringstream line(out.substr(at + 10, out.find('\n', at) - at - 10));
    std::set<std::string> seen;
    size_t count = 0;
    for (std::string id; line >> id; ++count) seen.insert(id);
    return std::pair{count, seen.size()};
  };
  r = hypic(tmp, "generate --model " + model + " --input-ids ids.json --max-new-tokens 40");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(generated(r.out).second, 40u) << r.out;
  r = hypic(tmp, "generate --model " + model +
                     " --input-ids ids.json --max-new-tokens 40 --no-repeat-ngram 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(generated(r.out), (std::pair<size_t, size_t>{40, 40})) << r.out;

  const std::string bad = tensor_named(model, "layers.1.mlp.down_proj");
  poke_f32(model, bad, 5, std::numeric_limits<float>::quiet_NaN());
  r = hypic(tmp, "model check --model " + model);
  expect_one_line_error(r, "tensor '" + bad + "'");
  EXPECT_NE(r.err.find("1 non-finite value, the first NaN at [0, 5]"), std::string::npos) << r.err;

  const std::string logits = "the model's logits are not finite (NaN";
  expect_one_line_error(
      hypic(tmp, "generate --model " + model + " --input-ids ids.json --max-new-tokens 3"), logits);
  r = hypic(tmp, "forward --model " + model + " --input-ids ids.json --out o.h5");
  expect_one_line_error(r, logits);
  EXPECT_NE(r.err.find("at position 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hypic model check"), std::string::npos) << r.err;

  write(tmp, "q.jsonl",
        R"({"id": "q", "segments": [{"tokens": [1, 2, 3]}], "question_tokens": [4, 5], )"
        R"("max_new_tokens": 2})"
        "\n");
  for (const char* mode : {"full", "pic"})
    expect_one_line_error(hypic(tmp, "serve --model " + model + " --queries q.jsonl --mode " +
                                         mode + " --out out-" + mode),
                          logits);

  // An infinity is named as such.
  poke_f32(model, bad, 5, 0.5f);
  poke_f32(model, bad, 7, std::numeric_limits<float>::infinity());
  expect_one_line_error(hypic(tmp, "model check --model " + model), "the first Inf at [0, 7]");
}

TEST(ModelChecksCli, TextNeedsTokenizerJsonOrByteTokenizer) {
  TempDir tmp("hypic-model-checks");
  init_model(tmp, "model");
  const std::string m = " --model " + tmp.file("model");
  write(tmp, "text.jsonl",
        R"({"id": "a", "text": "Some words."})"
        "\n");
  write(tmp, "tokens.jsonl",
        R"({"id": "a", "tokens": [1, 2, 3, 4]})"
        "\n");
  write(tmp, "q.jsonl",
        R"({"id": "q", "segments": ["a"], "question": "Why?"})"
        "\n");
  write(tmp, "qt.jsonl",
        R"({"id": "q", "segments": ["a"], "question_tokens": [7], "max_new_tokens": 2})"
        "\n");
  write(tmp, "chat.txt", "add-text Some words.\nask Why?\n");
  const std::string missing = "has no tokenizer.json";
  for (const char* policy : {"fail", "skip"}) {
    const CliRun r =
        hypic(tmp, "warmup" + m + " --corpus text.jsonl --store s.h5 --on-bad-line " + policy);
    expect_one_line_error(r, missing);
    EXPECT_NE(r.err.find("--byte-tokenizer"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(tmp.file("s.h5")));
  expect_one_line_error(
      hypic(tmp, "serve" + m + " --corpus tokens.jsonl --queries q.jsonl --out o"), missing);
  expect_one_line_error(hypic(tmp, "eval" + m +
                                       " --dataset hotpotqa --input " HYPIC_TEST_DATA_DIR
                                       "/datasets/hotpotqa.jsonl --templates " HYPIC_TEST_DATA_DIR
                                       "/../../inputs/datasets/templates.json --out e"),
                        missing);
  expect_one_line_error(in_dir(tmp, "cat chat.txt | " + std::string(HYPIC_BINARY) + " chat" + m),
                        missing);
  expect_one_line_error(hypic(tmp, "bench tokenize" + m), missing);

  // Token ids need no tokenizer; text with the flag is one token per byte.
  CliRun r = hypic(tmp, "warmup" + m + " --corpus tokens.jsonl --store t.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  r = hypic(tmp, "serve" + m + " --corpus tokens.jsonl --queries qt.jsonl --out o2");
  EXPECT_EQ(r.code, 0) << r.err;
  r = hypic(tmp, "warmup" + m + " --byte-tokenizer --corpus text.jsonl --store b.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1 computed"), std::string::npos) << r.out;
  r = hypic(tmp,
            "serve" + m + " --byte-tokenizer --corpus tokens.jsonl --queries q.jsonl --out o3");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(ModelChecksCli, PromptPlusNewTokensPastTheContextIsRefusedEverywhere) {
  TempDir tmp("hypic-model-checks");
  init_model(tmp, "model");
  const std::string model = tmp.file("model");
  set_context(model, 16);
  const std::string m = " --model " + model;
  write(tmp, "ids16.json", id_list(16));
  write(tmp, "ids17.json", id_list(17));
  write(tmp, "ids10.json", id_list(10));

  EXPECT_EQ(hypic(tmp, "forward" + m + " --input-ids ids16.json --out f.h5").code, 0);
  expect_one_line_error(hypic(tmp, "forward" + m + " --input-ids ids17.json --out g.h5"),
                        "ids17.json: the prompt has 17 tokens, more than the model's context of "
                        "16 positions");
  EXPECT_FALSE(fs::exists(tmp.file("g.h5")));
  // The last new token is only picked, never run: 10 + 7 tokens need 16 positions.
  EXPECT_EQ(hypic(tmp, "generate" + m + " --input-ids ids10.json --max-new-tokens 7").code, 0);
  expect_one_line_error(hypic(tmp, "generate" + m + " --input-ids ids10.json --max-new-tokens 8"),
                        "the prompt has 10 tokens and up to 8 new ones, which need 17 positions, "
                        "more than the model's context of 16 positions");

  write(tmp, "q.jsonl",
        R"({"id": "fits", "segments": [{"tokens": [1, 2, 3, 4, 5, 6, 7, 8]}], )"
        R"("question_tokens": [1, 2], "max_new_tokens": 7})"
        "\n"
        R"({"id": "long", "segments": [{"tokens": [1, 2, 3, 4, 5, 6, 7, 8]}], )"
        R"("question_tokens": [1, 2], "max_new_tokens": 8})"
        "\n");
  expect_one_line_error(hypic(tmp, "serve" + m + " --queries q.jsonl --out o"),
                        "query 'long': the prompt has 10 tokens and up to 8 new ones");
  EXPECT_FALSE(fs::exists(tmp.file("o")));
  CliRun r = hypic(tmp, "serve" + m + " --queries q.jsonl --out o --on-bad-line skip");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("query 'long'"), std::string::npos) << r.err;

  r = hypic(tmp, "eval" + m +
                     " --byte-tokenizer --dataset hotpotqa --input " HYPIC_TEST_DATA_DIR
                     "/datasets/hotpotqa.jsonl --templates " HYPIC_TEST_DATA_DIR
                     "/../../inputs/datasets/templates.json --limit 3 --out e");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("eval: skipping"), std::string::npos) << r.err;           // which
  EXPECT_NE(r.err.find("3 of 3 examples skipped"), std::string::npos) << r.err;  // how many
  EXPECT_NE(r.err.find("context of 16 positions"), std::string::npos) << r.err;
}

TEST(ModelChecksCli, TenMillionIdsAreRefusedBeforeAllocating) {
  TempDir tmp("hypic-model-checks");
  init_model(tmp, "model");
  {
    std::ofstream ids(tmp.file("big.json"));
    ids << "[0";
    for (int i = 1; i < 10000000; ++i) ids << ",7";
    ids << "]";
  }
  const CliRun r =
      hypic(tmp, "forward --model " + tmp.file("model") + " --input-ids big.json --out o.h5");
  expect_one_line_error(r, "the prompt has 10000000 tokens, more than the model's context");
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
}

// The token-id reader streams the file (no document tree) with the same checks in the same
// order as before: the accepted forms, then each refusal by its line.
TEST(ModelChecksCli, TokenIdFilesAreReadInEitherFormAndRefusedByName) {
  TempDir tmp("hypic-model-checks");
  init_model(tmp, "model");
  const std::string run = "forward --model " + tmp.file("model") + " --input-ids ";
  std::ofstream(tmp.file("list.json")) << "[3, 4, 5]";
  std::ofstream(tmp.file("object.json"))
      << R"({"note": [[1], {"input_ids": "x"}], "input_ids": [3, 4, 5], "after": [2.5]})";
  ASSERT_EQ(hypic(tmp, run + "list.json --out a.h5").code, 0);
  ASSERT_EQ(hypic(tmp, run + "object.json --out b.h5").code, 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"[3, 4", "is not valid JSON: [json.exception.parse_error.101]"},
      {R"({"input_ids": [3], "input_ids": 7})", "must hold a list of ints or {\"input_ids\""},
      {"[]", "holds no tokens"},
      {R"({"input_ids": [3, [4], 2.5]})", "element 1 is not an integer"},
      {"[3, -1, 99999]", "id -1 at position 1 is outside the vocabulary [0, "},
  };
  for (size_t i = 0; i < refused.size(); ++i) {
    const std::string name = "bad" + std::to_string(i) + ".json";
    std::ofstream(tmp.file(name)) << refused[i].first;
    expect_one_line_error(hypic(tmp, run + name + " --out c.h5"), refused[i].second);
  }
}

}  // namespace model_checks_cli_test
}  // namespace
