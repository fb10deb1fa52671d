// `hypic bench kernels` and `bench forward --threads`: they run on a tiny preset and write sane
// JSON (no assertion on time); Amdahl's fraction is computed as documented.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "bench/kernels.hpp"
#include "cli_test_util.hpp"

namespace {
namespace bench_kernels_test {
namespace fs = std::filesystem;
using nlohmann::json;

TEST(BenchKernels, AmdahlFractionIsTheShareThatScaled) {
  using hypic::bench::amdahl_parallel_fraction;
  EXPECT_DOUBLE_EQ(amdahl_parallel_fraction(2.0, 1.0, 2), 1.0);  // perfect
  EXPECT_DOUBLE_EQ(amdahl_parallel_fraction(2.0, 2.0, 2), 0.0);  // none
  EXPECT_NEAR(amdahl_parallel_fraction(1.0, 0.625, 4), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(amdahl_parallel_fraction(1.0, 3.0, 2), 0.0);  // slower: clamped
  EXPECT_DOUBLE_EQ(amdahl_parallel_fraction(1.0, 0.1, 2), 1.0);  // superlinear: clamped
}

class BenchThreadsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hypic_bench_kernels_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  cli_test::CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  json read_json(const std::string& name) const {
    return json::parse(cli_test::slurp(dir_ / name));
  }
  fs::path dir_;
};

TEST_F(BenchThreadsCli, KernelsRunsOnATinyPresetAndWritesSaneJson) {
  const cli_test::CliRun r =
      hypic("bench kernels --preset tiny --tokens 96 --reps 1 --threads 1,2 --json " + p("k.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("node-scale projection"), std::string::npos) << r.out;
  const json j = read_json("k.json");
  EXPECT_EQ(j.at("bench"), "kernels");
  EXPECT_EQ(j.at("threads"), json::array({1, 2}));
  std::set<std::string> ops;
  double shares = 0.0;
  for (const json& k : j.at("kernels")) {
    ops.insert(k.at("op").get<std::string>());
    EXPECT_GT(k.at("calls").get<int64_t>(), 0);
    EXPECT_GE(k.at("seconds_by_threads").at("1").get<double>(), 0.0);
    EXPECT_GE(k.at("seconds_by_threads").at("2").get<double>(), 0.0);
    EXPECT_TRUE(k.at("speedup_by_threads").contains("2"));
    const double f = k.at("parallel_fraction");
    EXPECT_TRUE(f >= 0.0 && f <= 1.0) << f;
    shares += k.at("share_of_prefill").get<double>();
  }
  // The prefill's ops all appear: projections, the delta rule, conv, attention, norms.
  for (const char* op : {"linear", "family_chunked", "causal_conv1d_silu", "attention_causal",
                         "rms_norm_zero_centred"})
    EXPECT_EQ(ops.count(op), 1u) << op;
  EXPECT_GT(shares, 0.0);
  EXPECT_LE(shares, 1.0 + 1e-9);  // the ops are timed inside the prefill
  EXPECT_GT(j.at("prefill_seconds_by_threads").at("1").get<double>(), 0.0);
  const json& proj = j.at("projection");
  EXPECT_FALSE(proj.at("assumption").get<std::string>().empty());
  ASSERT_EQ(proj.at("cores").size(), 3u);
  int last_cores = 0;
  for (const json& c : proj.at("cores")) {
    const int cores = c.at("cores");
    EXPECT_GT(cores, last_cores);
    last_cores = cores;
    const double s = c.at("speedup");
    EXPECT_GE(s, 1.0 - 1e-9);
    EXPECT_LE(s, cores + 1e-9);
  }
}

TEST_F(BenchThreadsCli, KernelsRefusesThreadCountsOutOfOrder) {
  cli_test::expect_one_line_error(hypic("bench kernels --preset tiny --threads 2,1"), "ascending");
}

TEST_F(BenchThreadsCli, ForwardMeasuresEachThreadCount) {
  cli_test::CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 1 --out " + p("m"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = hypic("bench forward --model " + p("m") + " --tokens 64 --reps 1 --threads 1,2 --json " +
            p("f.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("x@2"), std::string::npos) << r.out;  // the per-part table
  const json j = read_json("f.json");
  ASSERT_EQ(j.at("by_threads").size(), 2u);
  EXPECT_EQ(j.at("by_threads")[0].at("threads"), 1);
  EXPECT_EQ(j.at("by_threads")[1].at("threads"), 2);
  for (const json& at : j.at("by_threads")) {
    EXPECT_GT(at.at("prefill_seconds_median").get<double>(), 0.0);
    EXPECT_TRUE(at.at("seconds_by_part").contains("gdn_rule"));
  }
}

}  // namespace bench_kernels_test
}  // namespace
