// config.json sizes are checked, in 64 bits, before anything is allocated from them (issue
// #50): a layer or expert count, width or product past hypic's documented bounds
// (model/arch/common.hpp, docs/input-checks.md) is refused naming the field, at once, and a
// config-only summary counts parameters from shapes without a list per expert. A kimi_linear
// model without MLA layers needs no RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "model/checkpoint.hpp"
#include "model/config.hpp"
#include "model/config_info.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"

namespace {
namespace config_bounds_test {
using namespace hypic::model;
using nlohmann::json;
using test_util::error_of;

const std::string kConfigs = std::string(HYPIC_TEST_DATA_DIR) + "/configs";

json published(const std::string& name) {
  std::ifstream in(kConfigs + "/" + name);
  return json::parse(in);
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// 2e9 layers and no layer_types used to build a 2e9-entry layer list (25 s, 4.4 GB) before an
// out-of-memory line that named no field; -1 layers gave "cannot create std::vector larger than
// max_size()".
TEST(ConfigBounds, LayerCountIsBoundedBeforeTheLayerListIsBuilt) {
  json q = published("qwen3.5-35b-a3b.json");  // flat; the CLI test covers text_config
  q.erase("layer_types");
  q["num_hidden_layers"] = 2000000000;
  std::string e = error_of([&] { ModelConfig::from_json(q); });
  EXPECT_TRUE(has(e, "'num_hidden_layers' is 2000000000, outside 0..4096")) << e;
  e = error_of([&] { summarize_config(q); });
  EXPECT_TRUE(has(e, "num_hidden_layers")) << e;

  json k = published("kimi-linear-48b-a3b-instruct.json");
  k["num_hidden_layers"] = -1;
  e = error_of([&] { ModelConfig::from_json(k); });
  EXPECT_TRUE(has(e, "'num_hidden_layers' is -1, outside 0..4096")) << e;
  EXPECT_FALSE(has(e, "max_size")) << e;
}

// kimi_linear's shared experts x width was an int product: 3000 x 1000000 wrapped negative.
TEST(ConfigBounds, SharedExpertWidthIsA64BitProductNamedByItsFields) {
  json k = published("kimi-linear-48b-a3b-instruct.json");
  k["num_shared_experts"] = 1000;
  k["moe_intermediate_size"] = 1000000;
  std::string e = error_of([&] { ModelConfig::from_json(k); });
  EXPECT_TRUE(has(e, "num_shared_experts x moe_intermediate_size is 1000000000")) << e;
  k["num_shared_experts"] = 3000;
  e = error_of([&] { ModelConfig::from_json(k); });
  EXPECT_TRUE(has(e, "'num_shared_experts' is 3000, outside 0..1024")) << e;
  json r = published("ring-mini-linear-2.0.json");
  r["num_shared_experts"] = 1000;
  r["moe_shared_expert_intermediate_size"] = 1000000;
  e = error_of([&] { ModelConfig::from_json(r); });
  EXPECT_TRUE(has(e, "num_shared_experts x moe_shared_expert_intermediate_size")) << e;
}

TEST(ConfigBounds, WidthsAndHeadProductsAreBounded) {
  json q = published("qwen3.5-35b-a3b.json");
  json t = q;
  t["num_attention_heads"] = 8192;
  t["num_key_value_heads"] = 8192;
  t["head_dim"] = 65536;
  std::string e = error_of([&] { ModelConfig::from_json(t); });
  EXPECT_TRUE(has(e, "num_attention_heads x head_dim is 536870912")) << e;
  t = q;
  t["vocab_size"] = 1e12;
  e = error_of([&] { ModelConfig::from_json(t); });
  EXPECT_TRUE(has(e, "'vocab_size' is")) << e;
  EXPECT_TRUE(has(e, "outside 0..16777216")) << e;
}

// `model info --config` with 2e9 experts took a minute and 6.5 GB listing experts one by one.
// Now the count is refused by name, and the largest count allowed is summed from the fused
// [E, ...] shapes: the total is linear in E, as the shapes say.
TEST(ConfigBounds, ExpertCountIsBoundedAndCountedFromShapes) {
  json k = published("kimi-linear-48b-a3b-instruct.json");
  k["num_experts"] = 2000000000;
  const std::string e = error_of([&] { summarize_config(k); });
  EXPECT_TRUE(has(e, "'num_experts' is 2000000000, outside 0..16384")) << e;
  auto total = [&](int experts) {
    json j = k;
    j["num_experts"] = experts;
    return summarize_config(j).total_parameters;
  };
  const uint64_t p8 = total(8), p16 = total(16), pmax = total(16384);
  ASSERT_GT(p16, p8);
  EXPECT_EQ(pmax, p8 + (p16 - p8) / 8 * (16384 - 8));
  // The shape count equals the sum over the per-expert tensor list (the loader's layout).
  const ModelConfig c = ModelConfig::from_json(published("kimi-linear-48b-a3b-instruct.json"));
  uint64_t listed = 0;
  for (const HfTensor& t : hf_tensor_layout(c)) listed += hypic::Tensor::count(t.shape);
  EXPECT_EQ(config_parameter_count(c), listed);
  EXPECT_EQ(summarize_config(published("kimi-linear-48b-a3b-instruct.json")).total_parameters,
            listed);
}

// "No MLA layers" used to be read as "uses RoPE", and kimi_linear (partial_rotary_factor 0)
// was refused: "head_dim * partial_rotary_factor must be an even number >= 2 (got 32 *
// 0.000000)". transformers builds such a model (every layer KDA); so does hypic, and runs it.
TEST(ConfigBounds, KimiWithoutMlaLayersNeedsNoRope) {
  json k = published("kimi-linear-48b-a3b-instruct.json");
  const int n = k["num_hidden_layers"].get<int>();
  json kda = json::array();
  for (int l = 1; l <= n; ++l) kda.push_back(l);
  k["linear_attn_config"]["full_attn_layers"] = json::array();
  k["linear_attn_config"]["kda_layers"] = kda;
  const ModelConfig c = ModelConfig::from_json(k);
  EXPECT_EQ(c.num_full_layers(), 0);
  EXPECT_EQ(summarize_config(k).full_layers, 0);

  ModelConfig tiny = preset_config(parse_arch("kimi_linear"), "tiny");
  for (LayerKind& kind : tiny.layer_types) kind = LayerKind::Kda;
  json j = tiny.to_json();
  const ModelConfig back = ModelConfig::from_json(j);  // threw the RoPE error before
  EXPECT_EQ(back.num_full_layers(), 0);
  Model model(back, random_weights(back, 5));
  InferenceCache cache = model.new_cache();
  const std::vector<float> logits =
      model.prefill({1, 2, 3, 4, 5}, cache, LogitsMode::Last).to_vector();
  ASSERT_EQ(logits.size(), static_cast<size_t>(back.vocab_size));
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace config_bounds_test
}  // namespace
