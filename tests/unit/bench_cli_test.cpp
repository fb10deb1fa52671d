// `hypic bench ttft` over several segment counts and `hypic bench qps`, run as a user would on
// the tiny preset: they exit 0 and write JSON with every figure, sane and consistent. Nothing
// here asserts on speed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "temp_path.hpp"

namespace {
namespace bench_cli_test {
using nlohmann::json;

bool positive(const json& x) {
  return x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0;
}

TEST(BenchCli, TtftSweepWritesOnePointPerSegmentCount) {
  const test_util::TempDir dir("hypic-bench-cli");
  const std::string out = dir.file("ttft.json");
  const cli_test::CliRun r =
      cli_test::run_hypic(dir.file(""),
                          "bench ttft --preset tiny --segments 2,5 --segment-tokens 24 --queries 1 "
                          "--question-tokens 4 --modes full,prefix,pic --json " +
                              out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("prefix/pic"), std::string::npos) << r.out;  // the sweep's table
  // Progress on stderr: one line per query of each count's trace, once every mode answered it.
  EXPECT_NE(r.err.find("bench ttft: query 1 of 1 answered by every mode"), std::string::npos)
      << r.err;
  const json j = json::parse(cli_test::slurp(out));
  EXPECT_EQ(j["bench"], "ttft");
  EXPECT_EQ(j["corpus"], 48);
  ASSERT_EQ(j["points"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& p = j["points"][i];
    const int k = i == 0 ? 2 : 5;
    EXPECT_EQ(p["segments"], k);
    EXPECT_EQ(p["prompt_tokens"], k * 24 + 4);
    for (const char* mode : {"full", "prefix", "pic", "pic (store reads only)"})
      EXPECT_TRUE(positive(p["modes"][mode]["ttft_ms"]["p50"])) << mode << " at " << k;
    EXPECT_TRUE(positive(p["ratio_prefix_over_pic_p50"]));
    EXPECT_TRUE(positive(p["ratio_full_over_pic_p50"]));
  }
  EXPECT_EQ(j["segments"], 2);  // the first count also at the top level, as for one count
  EXPECT_EQ(j["modes"], j["points"][0]["modes"]);

  const cli_test::CliRun bad = cli_test::run_hypic(dir.file(""), "bench ttft --segments 4,x");
  cli_test::expect_one_line_error(bad, "--segments");
}

TEST(BenchCli, QpsWritesEveryModesLoadPointsWithTheTraceAndSeed) {
  const test_util::TempDir dir("hypic-bench-cli");
  const std::string out = dir.file("qps.json");
  const cli_test::CliRun r = cli_test::run_hypic(
      dir.file(""),
      "bench qps --preset tiny --corpus 8 --segment-tokens 16 --segments-min 2 --segments-max 4 "
      "--queries 4 --question-tokens 4 --cold-share 0.3 --loads 0.05,10000 --refine 1 --seed 3 "
      "--json " +
          out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json j = json::parse(cli_test::slurp(out));
  EXPECT_EQ(j["bench"], "qps");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_TRUE(positive(j["sla_ms"]));
  EXPECT_EQ(j["sla_ms_given"], false);
  ASSERT_EQ(j["trace"].size(), 4u);
  for (const json& q : j["trace"]) {
    EXPECT_GE(q["documents"].size(), 2u);
    EXPECT_LE(q["documents"].size(), 4u);
    EXPECT_TRUE(positive(q["gap"]));
  }
  ASSERT_EQ(j["modes"].size(), 3u);
  for (const json& m : j["modes"]) {
    EXPECT_TRUE(positive(m["capacity_qps"])) << m["mode"];
    ASSERT_GE(m["points"].size(), 1u) << m["mode"];
    double best = 0;
    for (const json& p : m["points"]) {
      EXPECT_TRUE(positive(p["rate_qps"]));
      EXPECT_LE(p["ttft_p50_ms"].get<double>(), p["ttft_p99_ms"].get<double>());
      EXPECT_EQ(p["within_sla"], p["ttft_p99_ms"].get<double>() <= j["sla_ms"].get<double>() &&
                                     p["offered_load"].get<double>() < 1);
      if (p["within_sla"]) best = std::max(best, p["rate_qps"].get<double>());
    }
    EXPECT_DOUBLE_EQ(m["sustainable_qps"].get<double>(), best) << m["mode"];
  }

  const cli_test::CliRun bad =
      cli_test::run_hypic(dir.file(""), "bench qps --preset tiny --cold-share 2");
  cli_test::expect_one_line_error(bad, "--cold-share");
}

// `bench forward --config FILE --layers N`: a model's shape from its config.json alone, random
// weights, the first N layers, and the time scaled to all of them (the device check's cold
// 32k-token query of the Qwen3.5-35B-A3B shape; here the tiny preset's config).
TEST(BenchCli, ForwardFromAConfigFileKeepsTheFirstLayersAndScales) {
  const test_util::TempDir dir("hypic-bench-fwd-config");
  const std::string model = dir.file("m"), out = dir.file("fwd.json");
  const cli_test::CliRun init = cli_test::run_hypic(
      dir.file(""), "model init --arch qwen3_5 --preset tiny --seed 1 --out " + model);
  ASSERT_EQ(init.code, 0) << init.out << init.err;
  const std::string config = model + "/config.json";
  const cli_test::CliRun r = cli_test::run_hypic(
      dir.file(""), "bench forward --config " + config +
                        " --layers 2 --tokens 16 --reps 1 --device cpu --json " + out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json j = json::parse(cli_test::slurp(out));
  const int all = j["config_layers"].get<int>();
  EXPECT_GT(all, 2);
  EXPECT_EQ(j["layers"], 2);
  EXPECT_TRUE(positive(j["prefill_seconds_median"]));
  // The device check fails a bench row whose logits are not finite (issue #45).
  EXPECT_EQ(j["logits_finite"], true);
  EXPECT_NE(r.out.find("logits of the last run: finite"), std::string::npos) << r.out;
  EXPECT_DOUBLE_EQ(j["prefill_seconds_scaled_to_config"].get<double>(),
                   j["prefill_seconds_median"].get<double>() * all / 2);
  EXPECT_NE(r.out.find("2 of its " + std::to_string(all) + " layers: scaled to " +
                       std::to_string(all) + " layers"),
            std::string::npos)
      << r.out;

  cli_test::expect_one_line_error(
      cli_test::run_hypic(dir.file(""), "bench forward --config " + config + " --layers 99"),
      "--layers 99");
  cli_test::expect_one_line_error(cli_test::run_hypic(dir.file(""), "bench forward --tokens 8"),
                                  "--model FOLDER or --config");
}

// `hypic bench compose` over every linear layer kind (tiny presets) and from a config.json:
// one JSON run per architecture with its figures and the entry's bytes; a bad list or file is
// one error line.
TEST(BenchCli, ComposeMeasuresEveryArchitecture) {
  const test_util::TempDir dir("hypic-bench-cli");
  const std::string out = dir.file("compose.json");
  const cli_test::CliRun r = cli_test::run_hypic(
      dir.file(""), "bench compose --preset tiny --tokens 20 --junction 4 --reps 1 --json " + out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("share %"), std::string::npos) << r.out;  // the summary table
  const json j = json::parse(cli_test::slurp(out));
  EXPECT_EQ(j["bench"], "compose");
  ASSERT_EQ(j["runs"].size(), 4u);
  const char* archs[] = {"qwen3_5_moe", "kimi_linear", "minimax", "bailing_moe_linear"};
  const char* forms[] = {"dense", "dense", "scalar", "scalar"};
  for (size_t i = 0; i < 4; ++i) {
    const json& run = j["runs"][i];
    EXPECT_EQ(run["arch"], archs[i]);
    EXPECT_EQ(run["t_form"], forms[i]);
    EXPECT_EQ(run["tokens"], 20);
    EXPECT_TRUE(positive(run["layer_forward_ms"])) << archs[i];
    EXPECT_TRUE(positive(run["entry_layer_bytes_bf16"])) << archs[i];
    EXPECT_EQ(run["meets_target"], run["build_percent_of_layer"].get<double>() <= 7.0);
    EXPECT_TRUE(run["summary_bytes"][forms[i]]["kept"].get<bool>()) << archs[i];
  }
  const std::string cfg =
      std::string(HYPIC_TEST_DATA_DIR) + "/configs/kimi-linear-48b-a3b-instruct.json";
  const cli_test::CliRun c = cli_test::run_hypic(
      dir.file(""), "bench compose --config " + cfg +
                        " --hidden 64 --value-heads 2 --key-heads 2 --head-dim 16 --tokens 11 "
                        "--junction 4 --reps 1 --json " +
                        out);
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  const json k = json::parse(cli_test::slurp(out));
  ASSERT_EQ(k["runs"].size(), 1u);
  EXPECT_EQ(k["runs"][0]["layer_kind"], "kda");
  EXPECT_EQ(k["runs"][0]["t_form"], "lowrank");  // 7 cached tokens ≤ 16/2 − 1
  EXPECT_EQ(k["runs"][0]["lowrank_max_tokens"], 7);
  cli_test::expect_one_line_error(
      cli_test::run_hypic(dir.file(""), "bench compose --arch no_such_arch --reps 1"),
      "no_such_arch");
}

}  // namespace bench_cli_test
}  // namespace
