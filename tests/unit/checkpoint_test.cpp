// Checkpoint loading and saving: the golden folders written by transformers, every
// mismatch error, the Qwen3-Next projection permutation, save -> load round trips,
// presets, deterministic random init, and the `hypic model` command's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/checkpoint.hpp"
#include "model/presets.hpp"
#include "model/safetensors.hpp"

#include "error_of.hpp"
#include "temp_path.hpp"

namespace {
namespace checkpoint_test {
using hypic::DType;
using test_util::error_of;
using test_util::read_bytes;
using test_util::TempDir;
namespace fs = std::filesystem;
using hypic::Tensor;
using namespace hypic::model;

const std::string kGolden = std::string(HYPIC_TEST_DATA_DIR) + "/golden";

bool golden(const std::string& name) {
  return fs::exists(kGolden + "/" + name + "/config.json");
}

// Every canonical tensor of a model, named, for whole-model comparisons.
std::vector<std::pair<std::string, const Tensor*>> flatten(const ModelWeights& w) {
  std::vector<std::pair<std::string, const Tensor*>> out = {
      {"embed", &w.embed}, {"final_norm", &w.final_norm}, {"lm_head", &w.lm_head}};
  auto mlp = [&](const std::string& p, const MlpWeights& m) {
    out.push_back({p + ".gate_up", &m.gate_up});
    out.push_back({p + ".down", &m.down});
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& L = w.layers[i];
    const std::string p = "layer" + std::to_string(i);
    for (auto [n, t] : std::vector<std::pair<const char*, const Tensor*>>{
             {"input_norm", &L.input_norm},
             {"post_attn_norm", &L.post_attn_norm},
             {"in_proj", &L.linear.in_proj},
             {"conv1d", &L.linear.conv1d},
             {"dt_bias", &L.linear.dt_bias},
             {"A_log", &L.linear.A_log},
             {"gdn_norm", &L.linear.norm},
             {"out_proj", &L.linear.out_proj},
             {"q_proj", &L.attn.q_proj},
             {"k_proj", &L.attn.k_proj},
             {"v_proj", &L.attn.v_proj},
             {"o_proj", &L.attn.o_proj},
             {"q_norm", &L.attn.q_norm},
             {"k_norm", &L.attn.k_norm},
             {"router", &L.moe.router},
             {"shared_gate", &L.moe.shared_expert_gate}})
      out.push_back({p + "." + n, t});
    mlp(p + ".mlp", L.mlp);
    mlp(p + ".shared", L.moe.shared_expert);
    for (size_t e = 0; e < L.moe.experts.size(); ++e)
      mlp(p + ".expert" + std::to_string(e), L.moe.experts[e]);
  }
  return out;
}

void expect_same_weights(const ModelWeights& a, const ModelWeights& b,
                         const std::function<float(float)>& round = nullptr) {
  const auto fa = flatten(a), fb = flatten(b);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    const Tensor& x = *fa[i].second;
    const Tensor& y = *fb[i].second;
    ASSERT_EQ(x.shape(), y.shape()) << fa[i].first;
    if (!round) {
      ASSERT_EQ(x.to_f32_vector(), y.to_f32_vector()) << fa[i].first;
    } else {  // either side may hold its matrices in bf16
      const std::vector<float> xv = x.to_f32_vector(), yv = y.to_f32_vector();
      for (size_t k = 0; k < xv.size(); ++k)
        ASSERT_EQ(round(xv[k]), yv[k]) << fa[i].first << "[" << k << "]";
    }
  }
}

// Rewrites a golden single-file checkpoint into `dst` after `edit` changes its tensors.
void rewrite(const std::string& golden_name, const std::string& dst,
             const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const std::string src = kGolden + "/" + golden_name;
  fs::create_directories(dst);
  fs::copy_file(src + "/config.json", dst + "/config.json", fs::copy_options::overwrite_existing);
  SafetensorsFile f(src + "/model.safetensors");
  std::map<std::string, Tensor> tensors;
  for (const auto& kv : f.tensors()) tensors[kv.first] = f.read(kv.first);
  edit(tensors);
  std::vector<NamedTensor> named;
  for (const auto& kv : tensors) named.push_back({kv.first, &kv.second});
  write_safetensors(dst + "/model.safetensors", named, hypic::DType::F32);
}

// ---------------------------------------------------------------------------------------
// Golden folders written by transformers

TEST(Checkpoint, LoadsGoldenFolders) {
  for (const char* name : {"qwen3_next", "qwen3_5", "qwen3_5_bf16", "qwen3_5_sharded"}) {
    if (!golden(name)) continue;
    // Widened to f32 (a bf16 checkpoint keeps bf16 projections by default: see
    // WeightsDTypeKeepsOrWidensTheProjections for those bytes).
    const LoadedModel m = load_checkpoint(kGolden + "/" + name, WeightsDType::F32);
    EXPECT_EQ(m.weights.layers.size(), static_cast<size_t>(m.config.num_hidden_layers)) << name;
    EXPECT_EQ(m.weights.parameter_count() * sizeof(float), m.weights.bytes());
    EXPECT_EQ(m.dtype, std::string(name) == "qwen3_5_bf16" ? "bf16" : "f32") << name;
  }
}

TEST(Checkpoint, ShardedFullLayoutEqualsSingleFile) {
  if (!golden("qwen3_5") || !golden("qwen3_5_sharded"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const LoadedModel single = load_checkpoint(kGolden + "/qwen3_5");
  const LoadedModel sharded = load_checkpoint(kGolden + "/qwen3_5_sharded");
  EXPECT_FALSE(single.sharded);
  EXPECT_TRUE(sharded.sharded);
  expect_same_weights(single.weights, sharded.weights);
  // The vision tower is skipped, and named as skipped.
  ASSERT_FALSE(sharded.ignored.empty());
  for (const std::string& n : sharded.ignored) EXPECT_EQ(n.rfind("model.visual.", 0), 0u) << n;
}

TEST(Checkpoint, DisagreeingTieFlagsAreSettledByTheCheckpoint) {
  if (!golden("qwen3_5_sharded"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  const std::string d = tmp.file("m");
  fs::copy(kGolden + "/qwen3_5_sharded", d, fs::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(read_bytes(d + "/config.json"));
  j["tie_word_embeddings"] = false;  // outer flag says untied, inner says tied
  std::ofstream(d + "/config.json") << j.dump();
  const LoadedModel m = load_checkpoint(d);  // no lm_head.weight stored: tied
  EXPECT_TRUE(m.config.tie_word_embeddings);
  EXPECT_TRUE(m.weights.lm_head.empty());
}

TEST(Checkpoint, Bf16CheckpointHoldsTheRoundedWeights) {
  if (!golden("qwen3_5") || !golden("qwen3_5_bf16"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const LoadedModel f32 = load_checkpoint(kGolden + "/qwen3_5");
  const LoadedModel bf = load_checkpoint(kGolden + "/qwen3_5_bf16");
  expect_same_weights(f32.weights, bf.weights, [](float x) { return bf16_to_f32(f32_to_bf16(x)); });
}

// A bf16 checkpoint keeps its projections in bf16 by default (the checkpoint's bits, half the
// bytes), widens them with WeightsDType::F32, and an f32 checkpoint rounds them on request.
TEST(Checkpoint, WeightsDTypeKeepsOrWidensTheProjections) {
  if (!golden("qwen3_5") || !golden("qwen3_5_bf16"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const LoadedModel kept = load_checkpoint(kGolden + "/qwen3_5_bf16");
  const LoadedModel wide = load_checkpoint(kGolden + "/qwen3_5_bf16", WeightsDType::F32);
  const LoadedModel f32 = load_checkpoint(kGolden + "/qwen3_5");
  const LoadedModel rounded = load_checkpoint(kGolden + "/qwen3_5", WeightsDType::BF16);
  EXPECT_EQ(kept.weights_dtype, "bf16");
  EXPECT_EQ(wide.weights_dtype, "f32");
  EXPECT_EQ(f32.weights_dtype, "f32");
  EXPECT_EQ(rounded.weights_dtype, "bf16");
  const LayerWeights& L = kept.weights.layers[0];
  EXPECT_EQ(kept.weights.embed.dtype(), hypic::DType::BF16);
  EXPECT_EQ(L.input_norm.dtype(), hypic::DType::F32);  // norms stay f32
  EXPECT_EQ(wide.weights.embed.dtype(), hypic::DType::F32);
  expect_same_weights(wide.weights, kept.weights);  // the same values, exactly
  // Rounding on request: the projections rounded to nearest even, everything else as stored.
  const std::vector<Tensor*> pf = projection_matrices(const_cast<ModelWeights&>(f32.weights));
  const std::vector<Tensor*> pr = projection_matrices(const_cast<ModelWeights&>(rounded.weights));
  ASSERT_EQ(pf.size(), pr.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    ASSERT_EQ(pr[i]->dtype(), hypic::DType::BF16);
    const std::vector<float> a = pf[i]->to_f32_vector(), b = pr[i]->to_f32_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) ASSERT_EQ(bf16_to_f32(f32_to_bf16(a[k])), b[k]) << i;
  }
  EXPECT_EQ(f32.weights.final_norm.to_vector(), rounded.weights.final_norm.to_vector());
  // Bytes in memory: the projections at 2 bytes; everything else at 4.
  ModelWeights& kw = const_cast<ModelWeights&>(kept.weights);
  size_t projection_values = 0;
  for (const Tensor* t : projection_matrices(kw)) projection_values += size_t(t->numel());
  EXPECT_GT(projection_values, kept.weights.parameter_count() * 9 / 10);
  EXPECT_EQ(kept.weights.bytes(), wide.weights.bytes() - 2 * projection_values);
  EXPECT_GT(kept.peak_memory_bytes, 0u);
  EXPECT_NE(load_summary(kept).find("bf16 in memory"), std::string::npos) << load_summary(kept);
  // The process-wide default (--weights-dtype) is what load_checkpoint(dir) uses.
  set_default_weights_dtype(WeightsDType::F32);
  EXPECT_EQ(load_checkpoint(kGolden + "/qwen3_5_bf16").weights_dtype, "f32");
  set_default_weights_dtype(WeightsDType::Auto);
  EXPECT_THROW(parse_weights_dtype("f16"), hypic::Error);
  // Saving bf16-held weights writes the values they hold.
  TempDir tmp("hypic-ckpt-wd");
  save_checkpoint(tmp.file("again"), kept.config, kept.weights, hypic::DType::BF16);
  expect_same_weights(kept.weights, load_checkpoint(tmp.file("again")).weights);
  // Mixed: the first shard (embedding included) rewritten in f32, so auto widens every
  // projection; the values are the same.
  const std::string mixed = tmp.file("mixed");
  save_checkpoint(mixed, kept.config, kept.weights, hypic::DType::BF16, 20000);
  std::string first;
  for (const auto& e : fs::directory_iterator(mixed))
    if (e.path().filename().string().rfind("model-00001-of-", 0) == 0) first = e.path().string();
  ASSERT_FALSE(first.empty());
  std::map<std::string, Tensor> tensors;
  {
    SafetensorsFile f(first);
    for (const auto& kv : f.tensors()) tensors[kv.first] = f.read(kv.first);
  }
  std::vector<NamedTensor> named;
  for (const auto& kv : tensors) named.push_back({kv.first, &kv.second});
  write_safetensors(first, named, hypic::DType::F32);
  const LoadedModel m = load_checkpoint(mixed);
  EXPECT_EQ(m.weights_dtype, "f32");
  EXPECT_EQ(m.dtype, "mixed(bf16,f32)");
  expect_same_weights(kept.weights, m.weights);
}

// The grouped Qwen3-Next projections, checked against the reshape transformers performs
// (fix_query_key_value_ordering), written out independently here: per key head g the
// qkvz rows are [q (dk) | k (dk) | v (G·dv) | z (G·dv)] and the ba rows [b (G) | a (G)].
TEST(Checkpoint, Qwen3NextGroupedProjectionsBecomeFlat) {
  if (!golden("qwen3_next"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const std::string dir = kGolden + "/qwen3_next";
  const LoadedModel m = load_checkpoint(dir);
  const ModelConfig& c = m.config;
  SafetensorsFile f(dir + "/model.safetensors");
  const Tensor qkvz = f.read("model.layers.0.linear_attn.in_proj_qkvz.weight");
  const Tensor ba = f.read("model.layers.0.linear_attn.in_proj_ba.weight");
  const Tensor& flat = m.weights.layers[0].linear.in_proj;
  const int64_t H = c.hidden_size, Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, G = Hv / Hk;
  ASSERT_GT(G, 1) << "the golden model should have grouped value heads";
  auto row_eq = [&](const Tensor& a, int64_t ra, const Tensor& b, int64_t rb) {
    for (int64_t j = 0; j < H; ++j)
      if (a[ra * H + j] != b[rb * H + j]) return false;
    return true;
  };
  const int64_t group = 2 * dk + 2 * G * dv, kd = Hk * dk, vd = Hv * dv, conv = 2 * kd + vd;
  for (int64_t g = 0; g < Hk; ++g) {
    for (int64_t i = 0; i < dk; ++i) {
      EXPECT_TRUE(row_eq(flat, g * dk + i, qkvz, g * group + i)) << "q " << g << "," << i;
      EXPECT_TRUE(row_eq(flat, kd + g * dk + i, qkvz, g * group + dk + i)) << "k";
    }
    for (int64_t j = 0; j < G; ++j) {
      const int64_t h = g * G + j;  // value head h uses key head h / G = g
      for (int64_t i = 0; i < dv; ++i) {
        EXPECT_TRUE(row_eq(flat, 2 * kd + h * dv + i, qkvz, g * group + 2 * dk + j * dv + i))
            << "v " << h;
        EXPECT_TRUE(row_eq(flat, conv + h * dv + i, qkvz, g * group + 2 * dk + G * dv + j * dv + i))
            << "z " << h;
      }
      EXPECT_TRUE(row_eq(flat, conv + vd + h, ba, g * 2 * G + j)) << "b " << h;
      EXPECT_TRUE(row_eq(flat, conv + vd + Hv + h, ba, g * 2 * G + G + j)) << "a " << h;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Errors

TEST(Checkpoint, MissingTensorIsNamed) {
  if (!golden("qwen3_next"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  const std::string name = "model.layers.2.linear_attn.A_log";
  rewrite("qwen3_next", tmp.file("m"), [&](auto& t) { t.erase(name); });
  const std::string msg = error_of([&] { load_checkpoint(tmp.file("m")); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;  // expected shape
}

TEST(Checkpoint, WrongShapeNamesTensorShapesAndFile) {
  if (!golden("qwen3_5"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  const std::string name = "model.language_model.layers.1.linear_attn.in_proj_z.weight";
  std::string expected;
  rewrite("qwen3_5", tmp.file("m"), [&](auto& t) {
    const Tensor& old = t.at(name);
    expected = old.shape_str();
    t[name] = Tensor({old.dim(0) - 1, old.dim(1)});
  });
  const std::string msg = error_of([&] { load_checkpoint(tmp.file("m")); });
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  EXPECT_NE(msg.find("[71, 40]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(Checkpoint, UnexpectedTensorIsRefusedButKnownPrefixesAreSkipped) {
  if (!golden("qwen3_next"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  rewrite("qwen3_next", tmp.file("extra"),
          [](auto& t) { t["model.layers.0.linear_attn.extra.weight"] = Tensor({2}); });
  const std::string msg = error_of([&] { load_checkpoint(tmp.file("extra")); });
  EXPECT_NE(msg.find("unexpected tensor 'model.layers.0.linear_attn.extra.weight'"),
            std::string::npos)
      << msg;
  rewrite("qwen3_next", tmp.file("mtp"), [](auto& t) { t["mtp.fc.weight"] = Tensor({2, 2}); });
  const LoadedModel m = load_checkpoint(tmp.file("mtp"));
  EXPECT_EQ(m.ignored, (std::vector<std::string>{"mtp.fc.weight"}));
}

TEST(Checkpoint, FusedExpertStacksAreAccepted) {
  if (!golden("qwen3_next"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  const LoadedModel ref = load_checkpoint(kGolden + "/qwen3_next");
  TempDir tmp("hypic-ckpt");
  rewrite("qwen3_next", tmp.file("m"), [&](auto& t) {
    for (int l = 0; l < ref.config.num_hidden_layers; ++l) {
      if (!ref.config.layer_is_moe(l)) continue;
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
      const int64_t E = ref.config.num_experts, I = ref.config.moe_intermediate_size,
                    H = ref.config.hidden_size;
      Tensor gu({E, 2 * I, H}), dn({E, H, I});
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + std::to_string(e) + ".";
        const Tensor g = t.at(q + "gate_proj.weight"), u = t.at(q + "up_proj.weight"),
                     d = t.at(q + "down_proj.weight");
        std::copy(g.values().begin(), g.values().end(), gu.values().begin() + e * 2 * I * H);
        std::copy(u.values().begin(), u.values().end(),
                  gu.values().begin() + e * 2 * I * H + I * H);
        std::copy(d.values().begin(), d.values().end(), dn.values().begin() + e * H * I);
        for (const char* w : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
          t.erase(q + w);
      }
      t[p + "gate_up_proj"] = gu;
      t[p + "down_proj"] = dn;
    }
  });
  expect_same_weights(ref.weights, load_checkpoint(tmp.file("m")).weights);
}

TEST(Checkpoint, TruncatedFileNamesFileAndTensor) {
  if (!golden("qwen3_5"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  const std::string d = tmp.file("m");
  fs::create_directories(d);
  fs::copy_file(kGolden + "/qwen3_5/config.json", d + "/config.json");
  fs::copy_file(kGolden + "/qwen3_5/model.safetensors", d + "/model.safetensors");
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") - 1000);
  const std::string msg = error_of([&] { load_checkpoint(d); });
  EXPECT_NE(msg.find(d + "/model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'model.language_model."), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Checkpoint, UnknownModelTypeAndMissingFiles) {
  TempDir tmp("hypic-ckpt");
  const std::string d = tmp.file("m");
  fs::create_directories(d);
  EXPECT_NE(error_of([&] { load_checkpoint(d); }).find("config.json"), std::string::npos);
  std::ofstream(d + "/config.json") << R"({"model_type": "mamba2", "hidden_size": 8})";
  const std::string msg = error_of([&] { load_checkpoint(d); });
  EXPECT_NE(msg.find("'mamba2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qwen3_next, qwen3_5"), std::string::npos) << msg;
  // A valid config without weights.
  save_checkpoint(d, preset_config(parse_arch("qwen3_5"), "tiny"),
                  random_weights(preset_config(parse_arch("qwen3_5"), "tiny"), 1), DType::F32);
  fs::remove(d + "/model.safetensors");
  EXPECT_NE(error_of([&] { load_checkpoint(d); }).find("no model.safetensors"), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Save -> load, presets, random init

TEST(Checkpoint, SaveThenLoadGivesIdenticalWeights) {
  TempDir tmp("hypic-ckpt");
  for (const std::string arch : {"qwen3_next", "qwen3_5"}) {
    const ModelConfig c = preset_config(parse_arch(arch), "tiny");
    const ModelWeights w = random_weights(c, 11);
    const std::string d = tmp.file(arch);
    save_checkpoint(d, c, w, DType::F32);
    const LoadedModel m = load_checkpoint(d);
    EXPECT_EQ(m.config.to_json(), c.to_json());
    expect_same_weights(w, m.weights);
    save_checkpoint(d, c, w, hypic::DType::BF16);  // overwrites in place
    expect_same_weights(w, load_checkpoint(d).weights,
                        [](float x) { return bf16_to_f32(f32_to_bf16(x)); });
    EXPECT_EQ(load_checkpoint(d).dtype, "bf16");
  }
}

TEST(Checkpoint, GoldenSurvivesSaveAndLoad) {
  // transformers' own weights through hypic's writer and back: the permutation for
  // qwen3_next is inverted exactly, and the file matches the original tensor by tensor.
  if (!golden("qwen3_next"))
    FAIL() << "golden data missing (tests/data/golden is committed; regenerate with "
              "scripts/golden/make_golden.py)";
  TempDir tmp("hypic-ckpt");
  const LoadedModel a = load_checkpoint(kGolden + "/qwen3_next");
  save_checkpoint(tmp.file("m"), a.config, a.weights, hypic::DType::F32);
  expect_same_weights(a.weights, load_checkpoint(tmp.file("m")).weights);
  SafetensorsFile orig(kGolden + "/qwen3_next/model.safetensors");
  SafetensorsFile ours(tmp.file("m") + "/model.safetensors");
  ASSERT_EQ(orig.tensors().size(), ours.tensors().size());
  for (const auto& kv : orig.tensors())
    EXPECT_EQ(orig.read(kv.first).to_vector(), ours.read(kv.first).to_vector()) << kv.first;
}

TEST(Checkpoint, ShardedSaveLoadsLikeSingleFile) {
  TempDir tmp("hypic-ckpt");
  const ModelConfig c = preset_config(parse_arch("qwen3_next"), "tiny");
  const ModelWeights w = random_weights(c, 5);
  save_checkpoint(tmp.file("s"), c, w, hypic::DType::F32, 200 * 1024);
  EXPECT_TRUE(fs::exists(tmp.file("s") + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(tmp.file("s") + "/model.safetensors"));
  const LoadedModel m = load_checkpoint(tmp.file("s"));
  EXPECT_TRUE(m.sharded);
  expect_same_weights(w, m.weights);
}

TEST(Checkpoint, HfLayoutMatchesParameterCount) {
  for (const std::string arch : {"qwen3_next", "qwen3_5"}) {
    const ModelConfig c = preset_config(parse_arch(arch), "tiny");
    EXPECT_EQ(config_parameter_count(c), random_weights(c, 1).parameter_count());
    for (const HfTensor& t : hf_tensor_layout(c)) {
      if (arch == "qwen3_5" && t.name != "lm_head.weight") {
        EXPECT_EQ(t.name.rfind("model.language_model.", 0), 0u) << t.name;
      }
    }
  }
}

TEST(Presets, SizesAreInTheirRanges) {
  for (const std::string arch : {"qwen3_next", "qwen3_5"}) {
    const ModelConfig tiny = preset_config(parse_arch(arch), "tiny");
    const ModelConfig small = preset_config(parse_arch(arch), "small");
    const ModelConfig bench = preset_config(parse_arch(arch), "bench");
    EXPECT_LT(config_parameter_count(tiny), 1000000u);
    EXPECT_GT(config_parameter_count(small), 1000000u);
    EXPECT_LT(config_parameter_count(small), 10000000u);
    EXPECT_GE(config_active_parameter_count(bench), 100000000u);
    EXPECT_LE(config_active_parameter_count(bench), 200000000u);
    // Qwen3.5 proportions: 3 linear : 1 attention, grouped value heads, GQA, partial RoPE.
    for (const ModelConfig* c : {&tiny, &small, &bench}) {
      EXPECT_EQ(c->num_linear_layers(), 3 * c->num_full_layers());
      EXPECT_GT(c->linear_num_value_heads, c->linear_num_key_heads);
      EXPECT_GT(c->num_attention_heads, c->num_key_value_heads);
      EXPECT_EQ(c->rotary_dim() * 4, c->head_dim);
      EXPECT_EQ(c->num_experts > 0, arch == "qwen3_next");
    }
  }
  EXPECT_NE(
      error_of([] { preset_config(parse_arch("qwen3_5"), "huge"); }).find("tiny, small, bench"),
      std::string::npos);
}

TEST(Presets, NormalGeneratorIsStandardNormalAndReproducible) {
  NormalRng a(123), b(123);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = a.normal();
    ASSERT_EQ(x, b.normal());
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.02);
  // A pinned value: changing the generator changes every checkpoint `model init` writes.
  NormalRng c(42);
  EXPECT_NEAR(c.uniform(), static_cast<double>(std::mt19937_64(42)() >> 11) / 9007199254740992.0,
              0.0);
}

TEST(Presets, RandomInitIsDeterministicPerSeed) {
  for (const std::string arch : {"qwen3_next", "qwen3_5"}) {
    const ModelConfig c = preset_config(parse_arch(arch), "tiny");
    const ModelWeights a = random_weights(c, 7), b = random_weights(c, 7), d = random_weights(c, 8);
    expect_same_weights(a, b);
    EXPECT_NE(a.embed.to_vector(), d.embed.to_vector());
    // Sensible values: finite, zero-centred norms near zero, A_log in [0, log 16].
    for (const auto& [name, t] : flatten(a))
      for (int64_t i = 0; i < t->numel(); ++i) ASSERT_TRUE(std::isfinite((*t)[i])) << name;
    for (const LayerWeights& L : a.layers) {
      for (int64_t i = 0; i < L.input_norm.numel(); ++i)
        EXPECT_LT(std::fabs(L.input_norm[i]), 0.5f);
      if (L.kind == LayerKind::Linear)
        for (int64_t i = 0; i < L.linear.A_log.numel(); ++i) {
          EXPECT_GE(L.linear.A_log[i], 0.0f);
          EXPECT_LE(L.linear.A_log[i], std::log(16.0f));
        }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The `hypic model` command

struct CmdResult {
  int code;
  std::string err;
};

CmdResult run_hypic(const std::string& args, const std::string& tmp) {
  const std::string err_file = tmp + "/stderr.txt";
  const std::string cmd =
      std::string(HYPIC_BINARY) + " " + args + " > " + tmp + "/stdout.txt 2> " + err_file;
  const int status = std::system(cmd.c_str());
  return {status, read_bytes(err_file)};
}

void expect_one_line_error(const CmdResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("hypic: error: "), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ModelCommand, InitIsByteIdenticalForASeed) {
  TempDir tmp("hypic-ckpt");
  for (const char* arch : {"qwen3_next", "qwen3_5"}) {
    const std::string base = std::string("model init --arch ") + arch + " --preset tiny ";
    ASSERT_EQ(run_hypic(base + "--seed 3 --out " + tmp.file("a"), tmp.file("")).code, 0);
    ASSERT_EQ(run_hypic(base + "--seed 3 --out " + tmp.file("b"), tmp.file("")).code, 0);
    ASSERT_EQ(
        run_hypic(base + "--seed 4 --out " + tmp.file("c") + " --dtype bf16", tmp.file("")).code,
        0);
    const std::string a = read_bytes(tmp.file("a") + "/model.safetensors");
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, read_bytes(tmp.file("b") + "/model.safetensors")) << arch;
    EXPECT_EQ(read_bytes(tmp.file("a") + "/config.json"),
              read_bytes(tmp.file("b") + "/config.json"));
    const LoadedModel c = load_checkpoint(tmp.file("c"));
    EXPECT_EQ(c.dtype, "bf16");
    EXPECT_NE(load_checkpoint(tmp.file("a")).weights.embed.to_f32_vector(),
              c.weights.embed.to_f32_vector());  // c keeps its bf16 embedding
    // The command writes exactly what the library writes for that seed.
    const ModelConfig cfg = preset_config(parse_arch(arch), "tiny");
    save_checkpoint(tmp.file("lib"), cfg, random_weights(cfg, 3), hypic::DType::F32);
    EXPECT_EQ(a, read_bytes(tmp.file("lib") + "/model.safetensors")) << arch;
  }
}

TEST(ModelCommand, InfoPrintsLayoutAndCounts) {
  TempDir tmp("hypic-ckpt");
  ASSERT_EQ(run_hypic("model init --arch qwen3_5 --preset tiny --seed 1 --out " + tmp.file("m"),
                      tmp.file(""))
                .code,
            0);
  ASSERT_EQ(run_hypic("model info --model " + tmp.file("m"), tmp.file("")).code, 0);
  const std::string out = read_bytes(tmp.file("") + "/stdout.txt");
  EXPECT_NE(out.find("L L L A"), std::string::npos) << out;
  EXPECT_NE(out.find(std::to_string(
                config_parameter_count(preset_config(parse_arch("qwen3_5"), "tiny")))),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("f32"), std::string::npos) << out;
}

TEST(ModelCommand, BadInputGivesOneLineAndNonZeroExit) {
  TempDir tmp("hypic-ckpt");
  expect_one_line_error(run_hypic("model info --model " + tmp.file("none"), tmp.file("")),
                        "does not exist");
  fs::create_directories(tmp.file("llama"));
  std::ofstream(tmp.file("llama") + "/config.json") << R"({"model_type": "llama"})";
  expect_one_line_error(run_hypic("model info --model " + tmp.file("llama"), tmp.file("")),
                        "unsupported model_type 'llama'");
  if (golden("qwen3_5")) {
    const std::string d = tmp.file("trunc");
    fs::create_directories(d);
    fs::copy_file(kGolden + "/qwen3_5/config.json", d + "/config.json");
    fs::copy_file(kGolden + "/qwen3_5/model.safetensors", d + "/model.safetensors");
    fs::resize_file(d + "/model.safetensors", 4096);
    expect_one_line_error(run_hypic("model info --model " + d, tmp.file("")), "truncated");
  }
  // CLI11 rejects an unknown architecture before hypic runs.
  const CmdResult r = run_hypic(
      "model init --arch llama --preset tiny --seed 1 --out " + tmp.file("x"), tmp.file(""));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("llama"), std::string::npos) << r.err;
}

}  // namespace checkpoint_test
}  // namespace
