// The roofline cost model (model/roofline.hpp, `hypic bench roofline`): every op class's FLOPs
// and bytes against a hand count on tiny configs, its matrix products equal to model/flops.hpp's
// count, the roofline time per class and in total, and the command's output and input checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "hypic/error.hpp"
#include "model/flops.hpp"
#include "model/presets.hpp"
#include "model/roofline.hpp"
#include "temp_path.hpp"

namespace {
namespace roofline_test {
namespace model = hypic::model;

// Two layers (Gated DeltaNet, then gated attention), dense MLPs, tiny sizes chosen so every
// count below can be checked by hand.
model::ModelConfig tiny_dense() {
  model::ModelConfig c = model::preset_config(model::parse_arch("qwen3_5"), "tiny");
  c.hidden_size = 8;
  c.vocab_size = 10;
  c.num_hidden_layers = 2;
  c.layer_types = {model::LayerKind::Linear, model::LayerKind::FullAttention};
  c.intermediate_size = 6;
  c.linear_num_key_heads = 1;
  c.linear_num_value_heads = 2;
  c.linear_key_head_dim = 2;
  c.linear_value_head_dim = 3;
  c.linear_conv_kernel_dim = 4;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.attention_output_gate = true;
  c.num_experts = 0;
  return c;
}

model::RooflineOptions unit_options(int64_t tokens) {
  model::RooflineOptions o;
  o.tokens = tokens;
  o.peak_flops = 1000;  // 1000 FLOP/s and 1000 B/s: seconds = max(FLOPs, bytes) / 1000
  o.bandwidth = 1000;
  return o;
}

TEST(Roofline, HandCountOfATinyDenseModel) {
  const model::ModelConfig c = tiny_dense();
  const model::Roofline r = model::prefill_roofline(c, unit_options(4));
  // T = 4, h = 8, bf16 weights and activations (2 bytes), f32 states (4), chunk 4 (= T).
  // Layer 0, Gated DeltaNet: conv dim 2·2 + 6 = 10, in rows 10 + 6 + 2·2 = 20.
  //   in_proj  2·4·8·20 = 1280 FLOPs; 2·8·20 + 2·4·(8 + 20) = 544 bytes
  //   out_proj 2·4·6·8  =  384 FLOPs; 2·6·8 + 2·4·(6 + 8)   = 208 bytes
  // Layer 1, gated attention, q rows 2·2·4 = 16, k|v rows 2·1·4 = 8:
  //   qkv  2·4·8·24 = 1536 FLOPs; 2·8·24 + 2·4·32 = 640 bytes
  //   o    2·4·8·8  =  512 FLOPs; 2·8·8 + 2·4·16  = 256 bytes
  EXPECT_DOUBLE_EQ(r.at("projections").flops, 1280 + 384 + 1536 + 512);
  EXPECT_DOUBLE_EQ(r.at("projections").bytes, 544 + 208 + 640 + 256);
  // 10 causal pairs, 2·2·10·4·2 FLOPs; q and out 2·4·2·4·2, K and V 2·4·2·1·4.
  EXPECT_DOUBLE_EQ(r.at("attention").flops, 320);
  EXPECT_DOUBLE_EQ(r.at("attention").bytes, 128 + 64);
  // 2·T·Hv·(3·dk·dv + C·(2dk + 2dv)) = 2·4·2·(18 + 4·10); q, k, v, g, beta and out
  // 2·4·(2·1·2 + 2·2·3 + 2·2), the state read and written 4·2·2·2·3.
  EXPECT_DOUBLE_EQ(r.at("linear_attention").flops, 928);
  EXPECT_DOUBLE_EQ(r.at("linear_attention").bytes, 160 + 96);
  // Per layer gate|up [8 -> 12] and down [6 -> 8]: 768 + 384 FLOPs, 352 + 208 bytes.
  EXPECT_DOUBLE_EQ(r.at("mlp").flops, 2 * (768 + 384));
  EXPECT_DOUBLE_EQ(r.at("mlp").bytes, 2 * (352 + 208));
  EXPECT_DOUBLE_EQ(r.at("moe_experts").flops, 0);
  EXPECT_DOUBLE_EQ(r.at("moe_experts").bytes, 0);
  // Per layer: norms 64 elements (4 FLOPs, 2 values moved), adds 64 (1, 3), SwiGLU 24 (4, 3).
  // Layer 0 also: conv 2·4·10·4 FLOPs and 2·2·10·4 bytes; gated norm 24 elements (8, 3).
  // Layer 1 also: the output gate, 32 elements (4, 3).
  EXPECT_DOUBLE_EQ(r.at("norms_elementwise").flops, (256 + 64 + 96) * 2 + 320 + 8 * 24 + 4 * 32);
  EXPECT_DOUBLE_EQ(r.at("norms_elementwise").bytes, (256 + 384 + 144) * 2 + 160 + 144 + 192);
  // Embedding rows (2 + 2)·4·8; final norm of one row 4·8 FLOPs, 2·2·8 bytes; lm_head 2·8·10
  // FLOPs, 2·10·8 + 2·(8 + 10) bytes.
  EXPECT_DOUBLE_EQ(r.at("embedding_lm_head").flops, 32 + 160);
  EXPECT_DOUBLE_EQ(r.at("embedding_lm_head").bytes, 128 + 32 + 160 + 36);
  // Roofline: each class's max(FLOPs, bytes) / 1000; the total their sum.
  double flops = 0, bytes = 0, seconds = 0;
  for (const model::OpClassCost& k : r.classes) {
    EXPECT_DOUBLE_EQ(k.seconds, std::max(k.flops, k.bytes) / 1000) << k.name;
    EXPECT_EQ(k.compute_bound, k.flops >= k.bytes) << k.name;
    flops += k.flops;
    bytes += k.bytes;
    seconds += k.seconds;
  }
  EXPECT_EQ(r.classes.size(), 7u);
  EXPECT_DOUBLE_EQ(r.flops, flops);
  EXPECT_DOUBLE_EQ(r.bytes, bytes);
  EXPECT_DOUBLE_EQ(r.seconds, seconds);
  EXPECT_DOUBLE_EQ(r.at("projections").seconds, 3.712);        // compute-bound
  EXPECT_DOUBLE_EQ(r.at("norms_elementwise").seconds, 2.064);  // memory-bound
  EXPECT_THROW(r.at("softmax"), hypic::Error);
}

TEST(Roofline, MoeExpertsReadEveryReachableExpertOnce) {
  model::ModelConfig c = model::preset_config(model::parse_arch("qwen3_5_moe"), "tiny");
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.layer_types = {model::LayerKind::FullAttention};
  c.mlp_only_layers.clear();
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 3;
  c.shared_expert_intermediate_size = 2;
  ASSERT_TRUE(c.layer_is_moe(0));
  // T = 4: 8 (token, expert) pairs reach all 4 experts.
  //   router 2·4·8·4 = 256 FLOPs; 2·8·4 + 2·4·(8 + 4) = 160 bytes
  //   experts 2·4·8·3·3·2 = 1152 FLOPs; 2·4·3·3·8 + 2·4·2·(16 + 9) = 976 bytes
  //   shared 2·4·8·7 = 448 FLOPs; 2·8·7 + 2·4·(16 + 6 + 1) = 296 bytes
  model::Roofline r = model::prefill_roofline(c, unit_options(4));
  EXPECT_DOUBLE_EQ(r.at("moe_experts").flops, 256 + 1152 + 448);
  EXPECT_DOUBLE_EQ(r.at("moe_experts").bytes, 160 + 976 + 296);
  EXPECT_DOUBLE_EQ(r.at("mlp").flops, 0);
  // T = 1: 2 pairs reach 2 experts: 2·2·3·3·8 weight bytes + 2·1·2·25 activation bytes.
  r = model::prefill_roofline(c, unit_options(1));
  EXPECT_DOUBLE_EQ(r.at("moe_experts").bytes, (2 * 8 * 4 + 2 * 12) + (288 + 100) + (112 + 46));
}

// The matrix-product classes are model/flops.hpp's count, on every architecture's presets and
// the published configs' shapes.
TEST(Roofline, ProductFlopsEqualThePrefillCount) {
  for (const std::string arch :
       {"qwen3_5", "qwen3_next", "qwen3_5_moe", "kimi_linear", "bailing_moe_linear", "minimax"}) {
    const model::ModelConfig c = model::preset_config(model::parse_arch(arch), "tiny");
    for (int64_t T : {1, 63, 64, 65, 1000}) {
      model::RooflineOptions o = unit_options(T);
      const model::Roofline r = model::prefill_roofline(c, o);
      const model::FlopCount f = model::prefill_flops(c, T, 0, 1, o.chunk);
      const std::string where = arch + " T=" + std::to_string(T);
      EXPECT_DOUBLE_EQ(r.at("projections").flops + r.at("mlp").flops + r.at("moe_experts").flops,
                       f.projections)
          << where;
      EXPECT_DOUBLE_EQ(r.at("attention").flops, f.attention) << where;
      EXPECT_DOUBLE_EQ(r.at("linear_attention").flops, f.delta_rule) << where;
      EXPECT_DOUBLE_EQ(r.at("embedding_lm_head").flops, f.lm_head + 4.0 * c.hidden_size) << where;
      for (const model::OpClassCost& k : r.classes) EXPECT_GE(k.bytes, 0) << where << k.name;
    }
  }
}

TEST(Roofline, RefusesBadOptionsAndUnknownGpus) {
  const model::ModelConfig c = tiny_dense();
  model::RooflineOptions o = unit_options(0);
  EXPECT_THROW(model::prefill_roofline(c, o), hypic::Error);
  o = unit_options(4);
  o.peak_flops = 0;
  EXPECT_THROW(model::prefill_roofline(c, o), hypic::Error);
  o = unit_options(4);
  o.bandwidth = -1;
  EXPECT_THROW(model::prefill_roofline(c, o), hypic::Error);
  EXPECT_DOUBLE_EQ(model::gpu_peak("H100").bf16_tflops, 989);
  EXPECT_DOUBLE_EQ(model::gpu_peak("h20").bf16_tflops, 148);
  try {
    model::gpu_peak("b300");
    FAIL() << "an unknown GPU must be refused";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("h100-pcie"), std::string::npos) << e.what();
  }
}

TEST(RooflineCli, PrintsEveryClassAndWritesJson) {
  test_util::TempDir tmp("hypic-roofline");
  const std::string config = std::string(HYPIC_TEST_DATA_DIR) + "/configs/qwen3.5-35b-a3b.json";
  cli_test::CliRun r =
      cli_test::run_hypic(tmp.file(""), "bench roofline --config " + config + " --gpu h20 --json " +
                                            tmp.file("r.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name : {"projections", "attention", "linear_attention", "moe_experts",
                           "norms_elementwise", "embedding_lm_head", "total"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << r.out;
  const nlohmann::json j = nlohmann::json::parse(cli_test::slurp(tmp.file("r.json")));
  EXPECT_EQ(j["tokens"], 32768);
  EXPECT_EQ(j["gpu"], "h20");
  EXPECT_EQ(j["classes"].size(), 7u);
  // The same figures as the library's.
  model::RooflineOptions o;
  o.tokens = 32768;
  o.peak_flops = 148e12;
  o.bandwidth = 4000e9;
  const model::Roofline want = model::prefill_roofline(
      model::ModelConfig::from_json(nlohmann::json::parse(cli_test::slurp(config))), o);
  EXPECT_DOUBLE_EQ(j["roofline_seconds"].get<double>(), want.seconds);
  EXPECT_NE(r.out.find("roofline prefill 32768 tokens:"), std::string::npos) << r.out;
  // Peak figures given by hand override the table's.
  r = cli_test::run_hypic(tmp.file(""), "bench roofline --config " + config +
                                            " --peak-tflops 148 --bandwidth-gbs 4000 --json " +
                                            tmp.file("s.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(cli_test::slurp(tmp.file("s.json")))["roofline_seconds"].get<double>(),
      want.seconds);
}

TEST(RooflineCli, BadInputIsOneErrorLine) {
  test_util::TempDir tmp("hypic-roofline");
  const std::string config = std::string(HYPIC_TEST_DATA_DIR) + "/configs/qwen3.5-35b-a3b.json";
  cli_test::expect_one_line_error(
      cli_test::run_hypic(tmp.file(""), "bench roofline --config " + config + " --gpu b300"),
      "unknown GPU 'b300'");
  cli_test::expect_one_line_error(
      cli_test::run_hypic(tmp.file(""), "bench roofline --config " + config),
      "give --gpu NAME, or --peak-tflops and --bandwidth-gbs");
  cli_test::expect_one_line_error(
      cli_test::run_hypic(tmp.file(""),
                          "bench roofline --config " + config + " --gpu h100 --tokens 0"),
      "--tokens must be at least 1");
  cli_test::expect_one_line_error(
      cli_test::run_hypic(tmp.file(""),
                          "bench roofline --config " + tmp.file("none.json") + " --gpu h100"),
      "none.json");
}

}  // namespace roofline_test
}  // namespace
