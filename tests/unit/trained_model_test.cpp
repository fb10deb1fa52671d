// The embedded trained model (inputs/models/qwen3_5-synthqa, scripts/train/train_tiny.py) against
// transformers: hypic's tokenizer gives the same ids for real prompts of the synthqa test set,
// the forward pass the same logits, cached greedy decoding the same tokens, and the decoded
// answer is the one transformers gives. Reference: tests/data/golden_trained
// (scripts/golden/make_trained_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_util.hpp"
#include "model/checkpoint.hpp"
#include "model/forward.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer.hpp"

namespace {
namespace trained_model_test {
namespace fs = std::filesystem;
using hypic::Tensor;
using hypic::model::InferenceCache;
using hypic::model::LogitsMode;
using hypic::model::Model;
using hypic::model::Tokenizer;
using hypic::test::decode_rows_diff;
using hypic::test::max_abs_diff;
using nlohmann::json;

const std::string kData = HYPIC_TEST_DATA_DIR;
const std::string kModelDir = kData + "/../../inputs/models/qwen3_5-synthqa";
const std::string kRefDir = kData + "/golden_trained";

// The foundation issue's bound for the golden models. The trained model's logits are larger
// (max |logit| ~12-20 rather than ~5), yet hypic stays within a few 1e-6 of transformers.
constexpr float kLogitTol = 1e-4f;

json reference_json() {
  std::ifstream in(kRefDir + "/reference.json");
  return json::parse(in);
}

TEST(TrainedModel, TokenizerMatchesTransformersOnTestPrompts) {
  const Tokenizer tok = Tokenizer::from_file(kModelDir + "/tokenizer.json");
  const json ref = reference_json();
  ASSERT_FALSE(ref["cases"].empty());
  for (const auto& c : ref["cases"]) {
    const auto& pieces = c["pieces"];
    ASSERT_EQ(pieces.size(), c["piece_ids"].size());
    for (size_t i = 0; i < pieces.size(); ++i)
      EXPECT_EQ(tok.encode(pieces[i].get<std::string>(), /*parse_special=*/false),
                c["piece_ids"][i].get<std::vector<int32_t>>())
          << c["id"] << " piece " << i;
  }
}

TEST(TrainedModel, LogitsAndGreedyAnswersMatchTransformers) {
  auto loaded = hypic::model::load_checkpoint(kModelDir);
  Model model(std::move(loaded.config), std::move(loaded.weights));
  const Tokenizer tok = Tokenizer::from_file(kModelDir + "/tokenizer.json");
  const hypic::model::SafetensorsFile ref(kRefDir + "/reference.safetensors");
  const json info = reference_json();
  int correct = 0;
  for (size_t i = 0; i < info["cases"].size(); ++i) {
    const auto& c = info["cases"][i];
    const std::string n = std::to_string(i);
    const std::vector<int32_t> ids = ref.read_int32("ids_" + n);

    InferenceCache cache = model.new_cache();
    const Tensor logits = model.prefill(ids, cache, LogitsMode::All);
    // The reference keeps the last rows (the question and "Answer:"), to stay small.
    const Tensor expect = ref.read("logits_" + n);
    ASSERT_EQ(logits.dim(1), expect.dim(1));
    ASSERT_LE(expect.dim(0), logits.dim(0));
    const int64_t skip = logits.dim(0) - expect.dim(0);
    const float tol = kLogitTol;
    const float diff =
        max_abs_diff(logits.data() + skip * logits.dim(1), expect.data(), expect.values().size());
    std::printf("[ trained  ] %s T=%zu max|logit diff| = %.3g (bound %.3g)\n",
                c["id"].get<std::string>().c_str(), ids.size(), diff, tol);
    EXPECT_LE(diff, tol) << c["id"];

    InferenceCache gen_cache = model.new_cache();
    const std::vector<int32_t> greedy = model.generate_greedy(ids, 8, gen_cache);
    EXPECT_EQ(greedy, ref.read_int32("greedy_" + n)) << c["id"];

    // The cached decode rows that picked each greedy token.
    const float worst = decode_rows_diff(model, ids, greedy, ref.read("decode_logits_" + n));
    EXPECT_LE(worst, kLogitTol) << c["id"] << " decode";

    // The answer up to the end token, decoded by hypic, is transformers' answer.
    std::vector<int32_t> answer;
    for (int32_t t : greedy) {
      if (t == 0) break;
      answer.push_back(t);
    }
    const std::string text = tok.decode(answer, /*skip_special=*/true);
    EXPECT_EQ(text, c["answer_text"].get<std::string>()) << c["id"];
    const std::string gold = c["gold"][0].get<std::string>();
    correct += text == " " + gold;
  }
  // The model solves the task: at least 3 of the 4 reference prompts are answered right
  // (reference.json records transformers' answers next to the gold ones).
  EXPECT_GE(correct, 3);
}

}  // namespace trained_model_test
}  // namespace
