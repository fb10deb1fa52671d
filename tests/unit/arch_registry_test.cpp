// The architecture registry (src/model/arch/): what every registered architecture must
// provide, checked for all of them, and the errors for names that are not registered.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/checkpoint.hpp"
#include "model/presets.hpp"
#include "model/safetensors.hpp"

#include "error_of.hpp"
#include "temp_path.hpp"

namespace {
namespace arch_registry_test {
using test_util::error_of;
namespace fs = std::filesystem;
using hypic::DType;
using hypic::Tensor;
using namespace hypic::model;
using nlohmann::json;
using test_util::TempDir;

const std::string kGolden = std::string(HYPIC_TEST_DATA_DIR) + "/golden";

TEST(ArchRegistry, ListsTheSupportedArchitectures) {
  std::vector<std::string> names;
  for (const ArchSpec* a : architectures()) names.push_back(a->name());
  EXPECT_EQ(names, (std::vector<std::string>{"qwen3_next", "qwen3_5", "qwen3_5_moe", "minimax",
                                             "bailing_moe_linear", "kimi_linear"}));
  EXPECT_EQ(supported_architectures(),
            "qwen3_next, qwen3_5, qwen3_5_moe, minimax, bailing_moe_linear, kimi_linear");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size())
      << "two architectures share a name";
}

TEST(ArchRegistry, LookupByNameAndModelType) {
  std::set<std::string> seen_types;
  for (const ArchSpec* a : architectures()) {
    EXPECT_EQ(&parse_arch(a->name()), a);
    const std::vector<std::string> types = a->model_types();
    ASSERT_FALSE(types.empty()) << a->name();
    EXPECT_EQ(types.front(), a->name());
    for (const std::string& t : types) {
      EXPECT_EQ(arch_for_model_type(t), a) << t;
      EXPECT_TRUE(seen_types.insert(t).second) << "model_type '" << t << "' registered twice";
    }
  }
  EXPECT_EQ(arch_for_model_type("qwen3_5_text"), &parse_arch("qwen3_5"));
  EXPECT_EQ(arch_for_model_type("qwen3_5_moe_text"), &parse_arch("qwen3_5_moe"));
  EXPECT_EQ(arch_for_model_type("llama"), nullptr);
}

TEST(ArchRegistry, UnknownNamesListTheSupportedOnes) {
  const std::string cfg = error_of([] { ModelConfig::from_json({{"model_type", "foo"}}); });
  EXPECT_EQ(cfg,
            "config.json: unsupported model_type 'foo' (supported: qwen3_next, qwen3_5, "
            "qwen3_5_moe, minimax, bailing_moe_linear, kimi_linear)");
  const std::string arch = error_of([] { parse_arch("foo"); });
  EXPECT_EQ(arch,
            "unknown architecture 'foo' (supported: qwen3_next, qwen3_5, qwen3_5_moe, minimax, "
            "bailing_moe_linear, kimi_linear)");
  for (const ArchSpec* a : architectures()) {
    const std::string preset = error_of([&] { preset_config(*a, "huge"); });
    EXPECT_NE(preset.find("unknown preset 'huge'"), std::string::npos) << preset;
    for (const std::string& p : a->preset_names())
      EXPECT_NE(preset.find(p), std::string::npos) << preset;
  }
}

TEST(ArchRegistry, AConfigWithoutArchitectureIsAnErrorNotACrash) {
  ModelConfig c;
  EXPECT_NE(error_of([&] { c.validate(); }).find("no architecture"), std::string::npos);
  EXPECT_NE(error_of([&] { c.to_json(); }).find("no architecture"), std::string::npos);
  EXPECT_NE(error_of([&] { c.layer_is_moe(0); }).find("no architecture"), std::string::npos);
}

// Every preset of every architecture: config.json round trip (through the model_type the
// architecture writes), a layout whose in_proj parts fill each canonical row exactly once,
// tensors under the architecture's save prefix, and a parameter count that matches.
TEST(ArchRegistry, EveryPresetRoundTripsThroughConfigJson) {
  for (const ArchSpec* a : architectures()) {
    const std::vector<std::string> presets = a->preset_names();
    for (const char* p : {"tiny", "small", "bench"})
      EXPECT_NE(std::find(presets.begin(), presets.end(), p), presets.end())
          << a->name() << " has no '" << p << "' preset";
    for (const std::string& p : presets) {
      const ModelConfig c = preset_config(*a, p);
      EXPECT_EQ(c.arch, a);
      const json j = c.to_json();
      const ModelConfig back = ModelConfig::from_json(j);
      EXPECT_EQ(back.arch, a) << a->name() << " " << p;
      EXPECT_EQ(back.to_json(), j) << a->name() << " " << p;
      EXPECT_EQ(back.layout_string(), c.layout_string());
      for (int l = 0; l < c.num_hidden_layers; ++l)
        EXPECT_EQ(back.layer_is_moe(l), c.layer_is_moe(l)) << a->name() << " " << p << " " << l;

      const int64_t rows = c.linear_conv_dim() + c.linear_value_dim() +
                           2 * static_cast<int64_t>(c.linear_num_value_heads);
      // Only Gated DeltaNet layers have an in_proj (lightning layers, MiniMax's and Ring's, do
      // not).
      const bool gdn =
          std::count(c.layer_types.begin(), c.layer_types.end(), LayerKind::Linear) > 0;
      std::vector<int> hits(gdn ? static_cast<size_t>(rows) : 0, 0);
      for (const InProjPart& part : a->linear_in_proj(c))
        for (int64_t r : part.rows) {
          ASSERT_GE(r, 0);
          ASSERT_LT(r, rows) << part.name;
          ++hits[static_cast<size_t>(r)];
        }
      // (Only Gated DeltaNet layers have an in_proj; lightning and KDA layers read their own
      // tensors.)
      if (gdn)
        EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
            << a->name() << ": in_proj parts must cover every canonical row once";
      else
        EXPECT_TRUE(a->linear_in_proj(c).empty()) << a->name();

      const std::string prefix = a->weight_prefixes().front();
      for (const HfTensor& t : hf_tensor_layout(c)) {
        if (t.name != "lm_head.weight") {
          EXPECT_EQ(t.name.rfind(prefix, 0), 0u) << t.name;
        }
      }
    }
  }
}

// Saving and loading every architecture's tiny preset: identical config.json, and tensors
// under each of its ignored prefixes are skipped (and reported) rather than refused.
TEST(ArchRegistry, EveryArchitectureSavesLoadsAndSkipsItsIgnoredTensors) {
  TempDir tmp("hypic-arch");
  for (const ArchSpec* a : architectures()) {
    const ModelConfig c = preset_config(*a, "tiny");
    const std::string d = tmp.file(a->name());
    save_checkpoint(d, c, random_weights(c, 5), DType::F32);
    std::map<std::string, Tensor> tensors;
    {
      const SafetensorsFile f(d + "/model.safetensors");
      for (const auto& kv : f.tensors()) tensors.emplace(kv.first, f.read(kv.first));
    }
    std::vector<std::string> extra;
    for (const std::string& p : a->ignored_prefixes()) {
      extra.push_back(p + "extra.weight");
      tensors.emplace(extra.back(), Tensor({2, 2}));
    }
    std::vector<NamedTensor> named;
    for (const auto& kv : tensors) named.push_back({kv.first, &kv.second});
    write_safetensors(d + "/model.safetensors", named, DType::F32);

    const LoadedModel m = load_checkpoint(d);
    EXPECT_EQ(m.config.arch, a);
    EXPECT_EQ(m.config.to_json(), c.to_json());
    std::sort(extra.begin(), extra.end());
    std::vector<std::string> ignored = m.ignored;
    std::sort(ignored.begin(), ignored.end());
    EXPECT_EQ(ignored, extra) << a->name();
  }
}

// Adding an architecture means adding its golden folder (scripts/golden/make_golden.py), which the
// Models/Golden tests then check against transformers.
TEST(ArchRegistry, EveryArchitectureHasAGoldenModel) {
  for (const ArchSpec* a : architectures()) {
    const fs::path cfg = fs::path(kGolden) / a->name() / "config.json";
    ASSERT_TRUE(fs::exists(cfg)) << "no golden model for " << a->name() << " at " << cfg;
    std::ifstream in(cfg);
    EXPECT_EQ(ModelConfig::from_json(json::parse(in)).arch, a) << cfg;
  }
}

// qwen3_5_moe saves its experts as transformers keeps them (two fused stacks per layer, no
// per-expert tensors) and reads them back to the same weights.
TEST(ArchRegistry, Qwen35MoeSavesFusedExpertStacks) {
  TempDir tmp("hypic-moe");
  const ModelConfig c = preset_config(parse_arch("qwen3_5_moe"), "tiny");
  const ModelWeights w = random_weights(c, 9);
  const std::string d = tmp.file("m");
  save_checkpoint(d, c, w, DType::F32);
  const SafetensorsFile f(d + "/model.safetensors");
  const std::string L = "model.language_model.layers.1.mlp.";
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  ASSERT_TRUE(f.contains(L + "experts.gate_up_proj"));
  EXPECT_EQ(f.read(L + "experts.gate_up_proj").shape(), (std::vector<int64_t>{E, 2 * I, H}));
  EXPECT_EQ(f.read(L + "experts.down_proj").shape(), (std::vector<int64_t>{E, H, I}));
  EXPECT_FALSE(f.contains(L + "experts.0.gate_proj.weight"));
  EXPECT_TRUE(f.contains(L + "shared_expert_gate.weight"));
  EXPECT_TRUE(f.contains("lm_head.weight"));
  // Expert 2's up rows are rows I..2I of its slice of the stack.
  const Tensor gu = f.read(L + "experts.gate_up_proj");
  const Tensor& mine = w.layers[1].moe.experts[2].gate_up;
  EXPECT_EQ(gu.data()[(2 * 2 * I + I) * H + 3], mine.data()[I * H + 3]);

  const LoadedModel m = load_checkpoint(d);
  for (size_t l = 0; l < w.layers.size(); ++l)
    for (size_t e = 0; e < w.layers[l].moe.experts.size(); ++e) {
      EXPECT_EQ(m.weights.layers[l].moe.experts[e].gate_up.to_vector(),
                w.layers[l].moe.experts[e].gate_up.to_vector());
      EXPECT_EQ(m.weights.layers[l].moe.experts[e].down.to_vector(),
                w.layers[l].moe.experts[e].down.to_vector());
    }
}

}  // namespace arch_registry_test
}  // namespace
