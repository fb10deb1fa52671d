// ModelConfig: parsing Hugging Face config.json for qwen3_next and qwen3_5, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "hypic/error.hpp"
#include "model/config.hpp"
#include "model/presets.hpp"

namespace {
namespace config_test {
namespace fs = std::filesystem;
using hypic::model::LayerKind;
using hypic::model::ModelConfig;
using nlohmann::json;

const std::string kGolden = std::string(HYPIC_TEST_DATA_DIR) + "/golden";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A small, complete qwen3_next config written by hand (independent of the golden files).
json qwen3_next_json() {
  return json::parse(R"({
    "model_type": "qwen3_next", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 8, "shared_expert_intermediate_size": 12,
    "rope_theta": 5000.0, "partial_rotary_factor": 0.5, "full_attention_interval": 4
  })");
}

// Expects from_json to throw hypic::Error whose message contains every string in `parts`.
void expect_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    ModelConfig::from_json(j);
    FAIL() << "no error for " << j.dump();
  } catch (const hypic::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error must be one line: " << msg;
  }
}

TEST(Config, ParsesQwen3NextWithDefaults) {
  const ModelConfig c = ModelConfig::from_json(qwen3_next_json());
  EXPECT_STREQ(arch_name(c.arch), "qwen3_next");
  EXPECT_EQ(c.num_hidden_layers, 8);
  ASSERT_EQ(c.layer_types.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_types[i], (i % 4 == 3) ? LayerKind::FullAttention : LayerKind::Linear) << i;
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);  // default
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);  // default
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.linear_conv_dim(), 2 * 16 + 32);
  EXPECT_TRUE(c.layer_is_moe(0));
  EXPECT_EQ(c.layout_string(), "L L L A | L L L A");
  EXPECT_EQ(c.num_linear_layers(), 6);
  EXPECT_EQ(c.num_full_layers(), 2);
}

TEST(Config, MlpOnlyLayersAndSparseStep) {
  json j = qwen3_next_json();
  j["mlp_only_layers"] = {1};
  j["decoder_sparse_step"] = 2;
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_FALSE(c.layer_is_moe(0));  // (0+1) % 2 != 0
  EXPECT_FALSE(c.layer_is_moe(1));  // listed as dense
  EXPECT_FALSE(c.layer_is_moe(2));
  EXPECT_TRUE(c.layer_is_moe(3));
}

TEST(Config, ParsesGoldenQwen3Next) {
  const std::string p = kGolden + "/qwen3_next/config.json";
  if (!fs::exists(p)) FAIL() << "golden data missing at " << p;
  const ModelConfig c = ModelConfig::from_json(read_json(p));
  EXPECT_STREQ(arch_name(c.arch), "qwen3_next");
  EXPECT_EQ(c.layout_string(), "L L L A");
  EXPECT_FALSE(c.layer_is_moe(1));
  EXPECT_TRUE(c.layer_is_moe(0));
  EXPECT_GT(c.num_experts, 0);
}

TEST(Config, Qwen3_5FlatAndNestedAgree) {
  const std::string flat = kGolden + "/qwen3_5/config.json";
  const std::string nested = kGolden + "/qwen3_5_sharded/config.json";
  if (!fs::exists(flat) || !fs::exists(nested))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const ModelConfig a = ModelConfig::from_json(read_json(flat));
  const ModelConfig b = ModelConfig::from_json(read_json(nested));
  EXPECT_STREQ(arch_name(a.arch), "qwen3_5");
  EXPECT_STREQ(arch_name(b.arch), "qwen3_5");
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.layout_string(), "L L A | L L A");
  EXPECT_TRUE(a.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(a.rope_theta, 12000.0);  // from rope_parameters
  EXPECT_EQ(a.num_experts, 0);
}

TEST(Config, RopeParametersOverrideTopLevel) {
  json j = qwen3_next_json();
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rotary_dim(), 4);
}

TEST(Config, ExplicitLayerTypesWin) {
  json j = qwen3_next_json();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
  const ModelConfig c = ModelConfig::from_json(j);
  EXPECT_EQ(c.layer_types[0], LayerKind::FullAttention);
  EXPECT_EQ(c.layer_types[1], LayerKind::Linear);
  EXPECT_EQ(c.layer_types[2], LayerKind::FullAttention);
}

TEST(Config, UnknownModelTypeNamesItAndTheSupportedOnes) {
  json j = qwen3_next_json();
  j["model_type"] = "llama";
  expect_error(j, {"llama", "qwen3_next", "qwen3_5"});
}

TEST(Config, MissingModelType) {
  json j = qwen3_next_json();
  j.erase("model_type");
  expect_error(j, {"model_type"});
}

TEST(Config, MissingRequiredFieldIsNamed) {
  for (const char* field : {"hidden_size", "vocab_size", "linear_num_value_heads", "head_dim",
                            "num_experts", "moe_intermediate_size"}) {
    json j = qwen3_next_json();
    j.erase(field);
    expect_error(j, {"missing", field});
  }
}

TEST(Config, MissingFieldInTextConfigIsNamedWithItsPath) {
  const std::string nested = kGolden + "/qwen3_5_sharded/config.json";
  if (!fs::exists(nested))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  json j = read_json(nested);
  j["text_config"].erase("num_hidden_layers");
  expect_error(j, {"text_config.num_hidden_layers"});
}

TEST(Config, WrongTypeIsNamed) {
  json j = qwen3_next_json();
  j["hidden_size"] = "big";
  expect_error(j, {"hidden_size", "integer"});
}

TEST(Config, InconsistentSizesAreRejected) {
  json j = qwen3_next_json();
  j["linear_num_value_heads"] = 3;  // not a multiple of 2 key heads
  expect_error(j, {"linear_num_value_heads", "multiple"});
  j = qwen3_next_json();
  j["num_experts_per_tok"] = 5;  // more than 4 experts
  expect_error(j, {"num_experts_per_tok"});
  j = qwen3_next_json();
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = 65;  // past what the expert combine sorts per token
  expect_error(j, {"num_experts_per_tok", "at most 64"});
  j = qwen3_next_json();
  j["layer_types"] = {"linear_attention"};  // 1 entry for 8 layers
  expect_error(j, {"layer_types"});
  j = qwen3_next_json();
  j["layer_types"] = std::vector<std::string>(8, "sliding_attention");
  expect_error(j, {"sliding_attention"});
}

TEST(Config, NonsensicalContextAndEosAreRejected) {
  json j = qwen3_next_json();
  j["max_position_embeddings"] = 0;
  expect_error(j, {"max_position_embeddings", "positive"});
  j = qwen3_next_json();
  j["max_position_embeddings"] = -5;
  expect_error(j, {"max_position_embeddings"});
  j = qwen3_next_json();
  const int vocab = j.at("vocab_size").get<int>();
  j["eos_token_id"] = vocab;  // one past the last token
  expect_error(j, {"eos_token_id", std::to_string(vocab), "vocabulary"});
  j = qwen3_next_json();
  j["eos_token_id"] = {1, -2};
  expect_error(j, {"eos_token_id", "-2"});
  j = qwen3_next_json();
  j["eos_token_id"] = vocab - 1;  // the last token is fine
  EXPECT_NO_THROW(ModelConfig::from_json(j));
}

TEST(Config, UnsupportedRopeTypeIsRejected) {
  json j = qwen3_next_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, {"yarn"});
}

TEST(Config, ToJsonRoundTripsForEveryPreset) {
  for (const std::string arch : {"qwen3_next", "qwen3_5"}) {
    const hypic::model::ArchSpec& spec = hypic::model::parse_arch(arch);
    for (const std::string& p : spec.preset_names()) {
      const ModelConfig c = hypic::model::preset_config(spec, p);
      const json j = c.to_json();
      const ModelConfig back = ModelConfig::from_json(j);
      EXPECT_EQ(back.to_json(), j) << arch << " " << p;
      EXPECT_EQ(back.layout_string(), c.layout_string());
      if (arch == "qwen3_5") {
        EXPECT_EQ(j.at("model_type"), "qwen3_5");
        EXPECT_TRUE(j.contains("text_config"));
      }
    }
  }
}

}  // namespace config_test
}  // namespace
