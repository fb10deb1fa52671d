// Config-only summaries of the published models (tests/data/configs, sources in its README):
// parameter counts against the published figures, the layer split, and the cache sizes
// computed by hand from the config; and `hypic model info --config` through the binary.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "error_of.hpp"
#include "model/config_info.hpp"
#include "model/presets.hpp"
#include "pic/linear_summary.hpp"

namespace {
namespace config_info_test {
namespace fs = std::filesystem;
using hypic::model::ConfigSummary;
using hypic::model::summarize_config;
using nlohmann::json;

const std::string kConfigs = std::string(HYPIC_TEST_DATA_DIR) + "/configs";

ConfigSummary summary(const std::string& file) {
  std::ifstream in(kConfigs + "/" + file);
  return summarize_config(json::parse(in));
}

double rel(uint64_t got, double published) {
  return std::fabs(static_cast<double>(got) - published) / published;
}

// Qwen3.5-35B-A3B, text decoder: "35B in total" (model card). The checkpoint also holds a
// vision tower and an MTP layer, which the card's figure and hypic's count leave out.
TEST(ConfigInfo, Qwen35MoeMatchesThePublishedCount) {
  const ConfigSummary s = summary("qwen3.5-35b-a3b.json");
  EXPECT_TRUE(s.runnable);
  EXPECT_EQ(s.architecture, "qwen3_5_moe");
  EXPECT_EQ(s.layers, 40);
  EXPECT_EQ(s.linear_layers, 30);
  EXPECT_EQ(s.full_layers, 10);
  std::printf("[ config   ] qwen3.5-35b-a3b: %llu total, %llu active\n",
              static_cast<unsigned long long>(s.total_parameters),
              static_cast<unsigned long long>(s.active_parameters));
  EXPECT_LE(rel(s.total_parameters, 35e9), 0.01);
  // "3B activated" is a rounded figure: 8 of 256 experts + the shared one + attention +
  // embeddings come to 3.5B with the embeddings, 2.4B without.
  EXPECT_GE(s.active_parameters, 2.5e9);
  EXPECT_LT(s.active_parameters, 3.5e9);
  // 10 full layers x (K + V) x 2 KV heads x 256 x bf16
  EXPECT_EQ(s.kv_bytes_per_token, 10u * 2 * 2 * 256 * 2);
  EXPECT_EQ(s.entry_bytes_per_token, s.kv_bytes_per_token);
  // 30 linear layers x (T 32x128x128 + S 32x128x128 + conv 3 x 8192) x bf16
  EXPECT_EQ(s.entry_fixed_bytes, 30u * (2 * 32 * 128 * 128 + 3 * 8192) * 2);
  EXPECT_EQ(s.entry_lowrank_max_tokens, 0);  // Gated DeltaNet entries keep T dense
  // Per-head forms' ends (docs/entry-forms.md): T and S 32x128x128 each; S in fp8 128 row
  // exponents + 128x128/2 code pairs per head.
  EXPECT_EQ(s.entry_t_bytes, 30u * 32 * 128 * 128 * 2);
  EXPECT_EQ(s.entry_s_bytes, 30u * 32 * 128 * 128 * 2);
  EXPECT_EQ(s.entry_s_fp8_bytes, 30u * 32 * (128 + 128 * 128 / 2) * 2);
}

// Kimi-Linear-48B-A3B-Instruct: the published checkpoint's tensors add up to 49,122,681,728
// parameters (its 20 safetensors files, see the README); the name says 48B.
TEST(ConfigInfo, KimiLinearMatchesThePublishedCheckpoint) {
  const ConfigSummary s = summary("kimi-linear-48b-a3b-instruct.json");
  EXPECT_TRUE(s.runnable);  // counted from the loader's own tensor layout
  EXPECT_EQ(s.linear_kind, "KDA");
  EXPECT_EQ(s.full_kind, "MLA");
  EXPECT_EQ(s.layers, 27);
  EXPECT_EQ(s.linear_layers, 20);
  EXPECT_EQ(s.full_layers, 7);
  EXPECT_LE(rel(s.total_parameters, 49122681728.0), 0.01);
  EXPECT_GE(s.active_parameters, 2.5e9);  // "A3B"
  EXPECT_LT(s.active_parameters, 3.5e9);
  // MLA caches the 512-wide latent and the 64-wide RoPE key: 7 layers x 576 x bf16
  EXPECT_EQ(s.kv_bytes_per_token, 7u * 576 * 2);
  EXPECT_EQ(s.entry_bytes_per_token, s.kv_bytes_per_token);
  // 20 KDA layers x (T 32x128x128 + S 32x128x128 + conv 3 x 3 x 4096) x bf16
  EXPECT_EQ(s.entry_fixed_bytes, 20u * (2 * 32 * 128 * 128 + 3 * 3 * 4096) * 2);
  // Short segments keep T's WY form (the entries' own rule): diag 32x128 + 2·r·32x128.
  EXPECT_EQ(s.entry_lowrank_max_tokens, hypic::pic::lowrank_max_tokens(128));
  EXPECT_EQ(s.entry_lowrank_base_bytes, 20u * (32 * 128 + 32 * 128 * 128 + 3 * 3 * 4096) * 2);
  EXPECT_EQ(s.entry_lowrank_bytes_per_token, 20u * 2 * 32 * 128 * 2);
  EXPECT_LT(s.entry_lowrank_base_bytes + 63 * s.entry_lowrank_bytes_per_token, s.entry_fixed_bytes);
  EXPECT_GT(s.entry_lowrank_base_bytes + 64 * s.entry_lowrank_bytes_per_token, s.entry_fixed_bytes);
}

// Ring-mini-linear-2.0: "16B parameters and 957M activations" (the Ring-linear technical
// report, arXiv 2510.19338); the 957M are the active parameters without the embeddings.
TEST(ConfigInfo, RingMiniLinearMatchesThePublishedCounts) {
  const ConfigSummary s = summary("ring-mini-linear-2.0.json");
  EXPECT_TRUE(s.runnable);
  // The loader's own tensor layout counts the same total.
  const auto cfg = hypic::model::ModelConfig::from_json(
      nlohmann::json::parse(std::ifstream(kConfigs + "/ring-mini-linear-2.0.json")));
  EXPECT_EQ(hypic::model::config_parameter_count(cfg), s.total_parameters);
  EXPECT_EQ(hypic::model::config_active_parameter_count(cfg), s.active_parameters);
  EXPECT_EQ(s.layers, 20);
  EXPECT_EQ(s.linear_layers, 16);
  EXPECT_EQ(s.full_layers, 4);  // layers 4, 9, 14, 19
  EXPECT_LE(rel(s.active_parameters - s.embedding_parameters, 957e6), 0.01);
  EXPECT_GE(s.total_parameters, 15.5e9);  // "16B"
  EXPECT_LT(s.total_parameters, 16.5e9);
  // 4 softmax layers x (K + V) x 4 KV heads x 128 x bf16
  EXPECT_EQ(s.kv_bytes_per_token, 4u * 2 * 4 * 128 * 2);
  // lightning attention: T is one scalar per head, S 128 x 128 per head, no conv
  EXPECT_EQ(s.entry_fixed_bytes, 16u * (16 + 16 * 128 * 128) * 2);
}

// Qwen3.5-122B-A10B, text decoder: "122B" total, "A10B" activated (the model name; the
// card's figures are the name's). 8 of 256 experts + the shared one per layer.
TEST(ConfigInfo, Qwen35MoeLargeMatchesThePublishedCount) {
  const ConfigSummary s = summary("qwen3.5-122b-a10b.json");
  EXPECT_TRUE(s.runnable);
  EXPECT_EQ(s.architecture, "qwen3_5_moe");
  EXPECT_EQ(s.layers, 48);
  EXPECT_EQ(s.linear_layers, 36);
  EXPECT_EQ(s.full_layers, 12);
  std::printf("[ config   ] qwen3.5-122b-a10b: %llu total, %llu active\n",
              static_cast<unsigned long long>(s.total_parameters),
              static_cast<unsigned long long>(s.active_parameters));
  EXPECT_LE(rel(s.total_parameters, 122e9), 0.01);
  // "A10B" is rounded (as "A3B" above): 9.8B with the embeddings, 8.3B without.
  EXPECT_GE(s.active_parameters, 9.5e9);
  EXPECT_LT(s.active_parameters, 10.5e9);
  // 12 full layers x (K + V) x 2 KV heads x 256 x bf16
  EXPECT_EQ(s.kv_bytes_per_token, 12u * 2 * 2 * 256 * 2);
  // 36 linear layers x (T 64x128x128 + S 64x128x128 + conv 3 x (2·16·128 + 64·128)) x bf16
  EXPECT_EQ(s.entry_fixed_bytes, 36u * (2 * 64 * 128 * 128 + 3 * 12288) * 2);
}

// MiniMax-Text-01: "456 billion total parameters, of which 45.9 billion are activated per
// token" (the MiniMax-01 report and model card); the 45.9B leave out the embeddings (with them
// 48.4B). Its lightning layers keep T as one scalar per head.
TEST(ConfigInfo, MiniMaxText01MatchesThePublishedCounts) {
  const ConfigSummary s = summary("minimax-text-01.json");
  EXPECT_TRUE(s.runnable);
  EXPECT_EQ(s.architecture, "minimax");
  EXPECT_EQ(s.linear_kind, "lightning attention");
  EXPECT_EQ(s.layers, 80);
  EXPECT_EQ(s.linear_layers, 70);
  EXPECT_EQ(s.full_layers, 10);  // every 8th layer
  std::printf("[ config   ] minimax-text-01: %llu total, %llu active (%llu without embeddings)\n",
              static_cast<unsigned long long>(s.total_parameters),
              static_cast<unsigned long long>(s.active_parameters),
              static_cast<unsigned long long>(s.active_parameters - s.embedding_parameters));
  EXPECT_LE(rel(s.total_parameters, 456e9), 0.01);
  EXPECT_LE(rel(s.active_parameters - s.embedding_parameters, 45.9e9), 0.01);
  // 10 softmax layers x (K + V) x 8 KV heads x 128 x bf16
  EXPECT_EQ(s.kv_bytes_per_token, 10u * 2 * 8 * 128 * 2);
  // 70 lightning layers x (T: 64 scalars + S 64 x 128 x 128) x bf16, no conv tail; a dense
  // T would add 64 x 128 x 128 per layer (the entry's linear part would double)
  EXPECT_EQ(s.entry_fixed_bytes, 70u * (64 + 64 * 128 * 128) * 2);
  EXPECT_EQ(s.entry_t_form, "one scalar per head (constant decay)");
}

TEST(ConfigInfo, UnknownModelTypeIsOneClearLine) {
  const std::string e = test_util::error_of([] { summarize_config({{"model_type", "llama"}}); });
  EXPECT_NE(e.find("unsupported model_type 'llama'"), std::string::npos) << e;
  EXPECT_NE(e.find("kimi_linear"), std::string::npos) << e;  // runnable: in the supported list
  EXPECT_EQ(e.find("config only"), std::string::npos) << e;  // every architecture runs
}

TEST(ConfigInfo, ModelInfoConfigCommand) {
  const fs::path dir =
      fs::temp_directory_path() / ("hypic_config_info_" + std::to_string(getpid()));
  fs::create_directories(dir);
  cli_test::CliRun r =
      cli_test::run_hypic(dir, "model info --config " + kConfigs + "/qwen3.5-35b-a3b.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen3_5_moe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("40 (30 Gated DeltaNet, 10 gated attention)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kv cache     : 20480 bytes per token"), std::string::npos) << r.out;
  // 30 x 2146304 + 504 x 20480 today; T absent + S fp8: 30 x (532480 + 49152) + K/V; a
  // pure-attention model of the shape: 40 layers x 2048 bytes per token x 504.
  EXPECT_NE(r.out.find("T dense 74711040 bytes (today); T absent 43253760 (0.579); T absent + S "
                       "fp8 27770880 (0.372"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(40 layers of K/V) keeps 41287680 bytes"), std::string::npos) << r.out;
  r = cli_test::run_hypic(dir,
                          "model info --config " + kConfigs + "/kimi-linear-48b-a3b-instruct.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("config-only count"), std::string::npos) << r.out;  // runnable now
  EXPECT_NE(r.out.find("27 (20 KDA, 7 MLA)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("49122681728"), std::string::npos) << r.out;
  cli_test::expect_one_line_error(
      cli_test::run_hypic(dir, "model info --config " + (dir / "missing.json").string()),
      "cannot open");
  fs::remove_all(dir);
}

}  // namespace config_info_test
}  // namespace
