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
namespace kimi_linear_test {
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
  // The last segment's conv tail, as recomputed: the same tokens and layer input, so it differs
  // from recompute by f32 rounding only (a BLAS kernel may round a row differently depending on
  // how many rows the call has; OpenBLAS's Zen kernel does).
  const double conv_err = rel_diff(composed.layers[0].conv, full.layers[0].conv);
  std::printf("[ kimi     ] first KDA layer conv tail vs recompute: %.2e\n", conv_err);
  EXPECT_LE(conv_err, 1e-6);
  EXPECT_EQ(composed.n_tokens, full.n_tokens);
}

// KDA entries keep T in the smaller of its two exact forms: the WY form diag(γ) − XᵀY for a
// short segment (r cached tokens, dk + 2·r·dk values per head), the dense matrix above
// r = lowrank_max_tokens(dk). Composing a prompt of both kinds of segments equals recompute,
// and a low-rank entry survives the store's arrays (X and Y beside T) unchanged.
TEST(KimiLinear, ShortSegmentsKeepTheWyForm) {
  const ModelConfig cfg = preset_config(parse_arch("kimi_linear"), "tiny");
  Model model(cfg, random_weights(cfg, 31));
  const int V = cfg.vocab_size, Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim;
  const int max_r = hypic::pic::lowrank_max_tokens(dk);
  ASSERT_EQ(max_r, 7);  // dk 16: 16 + 2·7·16 = 240 < 256 = dk², and 8 tokens would be 272
  // Cached tokens (after the 4-token window): 7 (WY), 30 (dense), 1 (WY), 8 (dense).
  const std::vector<std::vector<int32_t>> segs = {ids(11, 2, V), ids(34, 9, V), ids(5, 4, V),
                                                  ids(12, 6, V)};
  std::vector<hypic::pic::SegmentEntry> entries;
  for (const auto& s : segs) entries.push_back(hypic::pic::compute_entry(model, s, 4));
  for (size_t i = 0; i < segs.size(); ++i)
    for (const hypic::pic::LinearLayerEntry& le : entries[i].linear) {
      const hypic::pic::LinearSummary& s = le.summary;
      const int r = static_cast<int>(segs[i].size()) - 4;
      const auto dense = hypic::pic::summary_bytes(hypic::pic::TStructure::Dense, Hv, dk, dk, 0,
                                                   hypic::DType::F32);
      const auto wy = hypic::pic::summary_bytes(hypic::pic::TStructure::LowRank, Hv, dk, dk, r,
                                                hypic::DType::F32);
      if (r <= max_r) {
        ASSERT_EQ(s.structure, hypic::pic::TStructure::LowRank) << i;
        EXPECT_EQ(s.rank, r);
        EXPECT_EQ(s.x.size(), size_t(Hv) * r * dk);
        EXPECT_LT(wy, dense);
        EXPECT_EQ(s.bytes(hypic::DType::F32), wy);
      } else {
        ASSERT_EQ(s.structure, hypic::pic::TStructure::Dense) << i;
        EXPECT_GE(wy, dense);
        EXPECT_EQ(s.bytes(hypic::DType::F32), dense);
      }
    }

  // The WY T, multiplied out, equals the dense T the layer captures over the same tokens.
  ASSERT_EQ(cfg.layer_types[0], LayerKind::Kda);
  const hypic::pic::LinearSummary as_dense =
      hypic::pic::convert(hypic::kernels::host_backend(), entries[0].linear.front().summary,
                          hypic::pic::TStructure::Dense);
  InferenceCache dense_capture = model.new_cache();
  model.prefill(std::vector<int32_t>(segs[0].begin(), segs[0].begin() + 4), dense_capture,
                LogitsMode::None);
  dense_capture.layers[0].capture_transition = true;
  model.prefill(std::vector<int32_t>(segs[0].begin() + 4, segs[0].end()), dense_capture,
                LogitsMode::None);
  const Tensor& t_dense = dense_capture.layers[0].transition;
  ASSERT_EQ(t_dense.numel(), int64_t(Hv) * dk * dk);
  EXPECT_LE(rel_diff(Tensor::from_vector({Hv, dk, dk}, as_dense.t), t_dense), 1e-6);

  // Composition: every segment's first-KDA-layer state path equals recompute.
  std::vector<hypic::pic::PlacedSegment> placed;
  std::vector<int32_t> whole;
  for (size_t i = 0; i < segs.size(); ++i) {
    placed.push_back({&segs[i], &entries[i]});
    whole.insert(whole.end(), segs[i].begin(), segs[i].end());
  }
  InferenceCache full = model.new_cache();
  model.prefill(whole, full, LogitsMode::None);
  InferenceCache composed = model.new_cache();
  hypic::pic::compose_segments(model, placed, false, composed);
  const double err = rel_diff(composed.layers[0].state, full.layers[0].state);
  std::printf("[ kimi     ] WY and dense KDA entries composed vs recompute: %.2e\n", err);
  EXPECT_LE(err, 1e-5);
  // Only short segments in a row (WY · WY · WY chains): still recompute.
  const std::vector<std::vector<int32_t>> shorts = {ids(9, 1, V), ids(6, 3, V), ids(11, 5, V)};
  std::vector<hypic::pic::SegmentEntry> short_entries;
  std::vector<hypic::pic::PlacedSegment> short_placed;
  std::vector<int32_t> short_whole;
  for (const auto& s : shorts) short_entries.push_back(hypic::pic::compute_entry(model, s, 4));
  for (size_t i = 0; i < shorts.size(); ++i) {
    short_placed.push_back({&shorts[i], &short_entries[i]});
    short_whole.insert(short_whole.end(), shorts[i].begin(), shorts[i].end());
  }
  InferenceCache short_full = model.new_cache(), short_composed = model.new_cache();
  model.prefill(short_whole, short_full, LogitsMode::None);
  hypic::pic::compose_segments(model, short_placed, false, short_composed);
  EXPECT_LE(rel_diff(short_composed.layers[0].state, short_full.layers[0].state), 1e-5);

  // The store's arrays: T [H, dk] (the diagonal part), X and Y [H, r, dk]; read back equal.
  hypic::store::Entry stored = hypic::pic::to_store_entry(entries[0]);
  const int layer = entries[0].linear.front().layer;
  const std::string base = "linear/" + std::to_string(layer) + "/";
  ASSERT_EQ(stored.arrays.count(base + "X"), 1u);
  EXPECT_EQ(stored.arrays.at(base + "T").shape(), (std::vector<int64_t>{Hv, dk}));
  EXPECT_EQ(stored.arrays.at(base + "Y").shape(), (std::vector<int64_t>{Hv, 7, dk}));
  EXPECT_EQ(hypic::pic::to_store_entry(entries[1]).arrays.count(base + "X"), 0u);  // dense
  const hypic::pic::SegmentEntry back = hypic::pic::from_store_entry(std::move(stored), cfg, 4);
  ASSERT_EQ(back.linear.size(), entries[0].linear.size());
  for (size_t l = 0; l < back.linear.size(); ++l) {
    const hypic::pic::LinearSummary &a = back.linear[l].summary, &b = entries[0].linear[l].summary;
    EXPECT_EQ(a.structure, hypic::pic::TStructure::LowRank);
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.t, b.t);
    EXPECT_EQ(a.x, b.x);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.s, b.s);
  }
  EXPECT_EQ(back.bytes(), entries[0].bytes());
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

}  // namespace kimi_linear_test
}  // namespace
