// kimi_linear specifics the generic suites (golden, PIC per architecture, registry) do not
// show: MLA's cached latent rows are position independent (no RoPE, so a segment entry is
// spliced at any offset unchanged), the layer plan of the published config, and the
// configurations refused with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "error_of.hpp"
#include "model/checkpoint.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/compose.hpp"
#include "pic/segment_entry.hpp"

namespace {
using hypic::Tensor;
using namespace hypic::model;
using nlohmann::json;

const std::string kConfigs = std::string(HYPIC_TEST_DATA_DIR) + "/configs";

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The tiny preset with its first layer made MLA: that layer's input is the embedding alone,
// so its cached rows depend on the token and nothing else unless the layer is positional.
Model mla_first_model() {
  ModelConfig c = preset_config(parse_arch("kimi_linear"), "tiny");
  c.layer_types[0] = LayerKind::Mla;
  c.validate();
  ModelWeights w = random_weights(c, 23);
  return Model(std::move(c), std::move(w));
}

std::vector<int32_t> ids(int n, int seed, int vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (seed + 31 * i + i * i / 5) % vocab;
  return v;
}

TEST(KimiLinear, MlaRowsArePositionIndependent) {
  Model model = mla_first_model();
  const int V = model.config().vocab_size;
  const std::vector<int32_t> prefix = ids(37, 3, V), segment = ids(21, 11, V);
  InferenceCache alone = model.new_cache();
  model.prefill(segment, alone, LogitsMode::None);
  std::vector<int32_t> both = prefix;
  both.insert(both.end(), segment.begin(), segment.end());
  InferenceCache after = model.new_cache();
  model.prefill(both, after, LogitsMode::None);
  const Tensor& a = alone.layers[0].k;
  const Tensor& b = after.layers[0].k;
  ASSERT_EQ(a.dim(0), 21);
  ASSERT_EQ(b.dim(0), 58);
  EXPECT_EQ(a.dim(1), 1);  // one latent row per token: [c | k_rope]
  EXPECT_EQ(a.dim(2), model.config().kv_lora_rank + model.config().qk_rope_head_dim);
  EXPECT_TRUE(alone.layers[0].v.empty());  // the latent rows are keys and values
  // The same rows 37 positions later (only the products' blocking differs).
  EXPECT_LE(max_abs_diff(a.data(), b.data() + 37 * a.dim(2), a.numel()), 1e-6f);
}

TEST(KimiLinear, MlaEntryIsSplicedUnrotated) {
  Model model = mla_first_model();
  const int V = model.config().vocab_size;
  const std::vector<int32_t> prefix = ids(29, 5, V), segment = ids(19, 7, V);
  const hypic::pic::SegmentEntry entry = hypic::pic::compute_entry(model, segment, 4);
  ASSERT_EQ(entry.attention.size(), 2u);  // layers 0 and 3
  const hypic::pic::AttentionLayerEntry& a = entry.attention.front();
  ASSERT_EQ(a.layer, 0);
  EXPECT_EQ(a.k.dim(0), 15);
  EXPECT_TRUE(a.v.empty());

  // Splice it behind a 29-token prefix plus the segment's 4 junction tokens.
  std::vector<int32_t> head = prefix;
  head.insert(head.end(), segment.begin(), segment.begin() + 4);
  InferenceCache cache = model.new_cache();
  model.prefill(head, cache, LogitsMode::None);
  hypic::pic::splice_layer(model.backend(), model.config(), entry, 0, 29, false, cache.layers[0]);
  const Tensor& k = cache.layers[0].k;
  ASSERT_EQ(k.dim(0), 33 + 15);
  EXPECT_EQ(std::memcmp(k.data() + 33 * k.dim(2), a.k.data(), a.k.bytes()), 0);  // unchanged
  // ... and they are what recomputing the whole prompt gives at that place.
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), segment.begin(), segment.end());
  InferenceCache full = model.new_cache();
  model.prefill(whole, full, LogitsMode::None);
  EXPECT_LE(max_abs_diff(full.layers[0].k.data() + 33 * k.dim(2), a.k.data(), a.k.numel()), 1e-6f);
}

double rel_diff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / den;
}

// MATH.md §2 on KDA: the first KDA layer's state after composing three cached segments (junction
// windows of 4 tokens recomputed under the true prefix, the rest T·S + S(R|0)) equals the state
// of recomputing the whole prompt; ignoring T (pic-addition) does not.
TEST(KimiLinear, ComposedKdaStateEqualsRecompute) {
  const ModelConfig cfg = preset_config(parse_arch("kimi_linear"), "tiny");
  ASSERT_EQ(cfg.layer_types[0], LayerKind::Kda);
  Model model(cfg, random_weights(cfg, 29));
  const int V = cfg.vocab_size;
  const std::vector<std::vector<int32_t>> segs = {ids(45, 2, V), ids(70, 9, V), ids(33, 4, V)};
  std::vector<hypic::pic::SegmentEntry> entries;
  for (const auto& s : segs) entries.push_back(hypic::pic::compute_entry(model, s, 4));
  std::vector<hypic::pic::PlacedSegment> placed;
  std::vector<int32_t> whole;
  for (size_t i = 0; i < segs.size(); ++i) {
    placed.push_back({&segs[i], &entries[i]});
    whole.insert(whole.end(), segs[i].begin(), segs[i].end());
  }
  InferenceCache full = model.new_cache();
  model.prefill(whole, full, LogitsMode::None);
  InferenceCache composed = model.new_cache(), added = model.new_cache();
  hypic::pic::compose_segments(model, placed, false, composed);
  hypic::pic::compose_segments(model, placed, true, added);
  const double err = rel_diff(composed.layers[0].state, full.layers[0].state);
  const double add_err = rel_diff(added.layers[0].state, full.layers[0].state);
  std::printf("[ kimi     ] first KDA layer state vs recompute: composed %.2e, addition %.2e\n",
              err, add_err);
  EXPECT_LE(err, 1e-5);
  EXPECT_GT(add_err, 1e-2);
  EXPECT_EQ(std::memcmp(composed.layers[0].conv.data(), full.layers[0].conv.data(),
                        full.layers[0].conv.bytes()),
            0);  // the last segment's conv tail, as recomputed (same tokens, same layer input)
  EXPECT_EQ(composed.n_tokens, full.n_tokens);
}

TEST(KimiLinear, PublishedConfigLayerPlan) {
  std::ifstream in(kConfigs + "/kimi-linear-48b-a3b-instruct.json");
  const ModelConfig c = ModelConfig::from_json(json::parse(in));
  EXPECT_EQ(c.num_linear_layers(), 20);
  EXPECT_EQ(c.num_full_layers(), 7);
  for (int l : {3, 7, 11, 15, 19, 23, 26})
    EXPECT_EQ(c.layer_types[static_cast<size_t>(l)], LayerKind::Mla) << l;
  EXPECT_FALSE(c.layer_is_moe(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_EQ(c.head_dim, 576);  // the cached latent row: kv_lora_rank 512 + rope key 64
  EXPECT_EQ(c.shared_expert_intermediate_size, 1024);
  EXPECT_EQ(c.moe_scoring, "sigmoid");
  EXPECT_FALSE(c.zero_centred_norm);
  // The round trip keeps the plan.
  const ModelConfig back = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST(KimiLinear, RefusedConfigsNameTheField) {
  std::ifstream in(kConfigs + "/kimi-linear-48b-a3b-instruct.json");
  const json base = json::parse(in);
  auto refused = [&](const char* key, const json& value) {
    json j = base;
    j[key] = value;
    return test_util::error_of([&] { ModelConfig::from_json(j); });
  };
  EXPECT_NE(refused("mla_use_nope", false).find("MLA with RoPE"), std::string::npos);
  EXPECT_NE(refused("num_key_value_heads", 8).find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(refused("moe_router_activation_func", "softmax").find("sigmoid"), std::string::npos);
  EXPECT_NE(refused("moe_layer_freq", 2).find("moe_layer_freq"), std::string::npos);
  json j = base;
  j["linear_attn_config"]["kda_layers"].push_back(4);  // layer 4 listed twice
  EXPECT_NE(test_util::error_of([&] { ModelConfig::from_json(j); }).find("exactly once"),
            std::string::npos);
}

}  // namespace
