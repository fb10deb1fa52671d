// The CPU's instruction sets and the peak loops of `hypic bench peak`: every loop that can run
// here computes exactly what its closed form says (at both parities of the iteration count, so
// a loop that did nothing or stopped early fails), and a loop that cannot run is refused by
// name. Nothing here asserts on speed.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/peak.hpp"
#include "cli_test_util.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/cpu.hpp"
#include "temp_path.hpp"

namespace {
namespace cpu_peak_test {
using hypic::kernels::PeakLoop;

TEST(CpuIsa, AgreesWithTheCompilersCpuidView) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const hypic::kernels::CpuIsa isa = hypic::kernels::cpu_isa();
  // Ours also asks the OS, so it may say no where cpuid says yes, never the other way.
  if (isa.avx2_fma) {
    EXPECT_TRUE(__builtin_cpu_supports("avx2"));
    EXPECT_TRUE(__builtin_cpu_supports("fma"));
  }
  if (isa.avx512f) {
    EXPECT_TRUE(__builtin_cpu_supports("avx512f"));
  }
  if (isa.avx512_bf16) {
    EXPECT_TRUE(isa.avx512f);
  }
  // Every x86-64 machine this project runs on has AVX2 and FMA (docs/cpu.md); a VM that hides
  // them from the OS would show here.
  EXPECT_EQ(isa.avx2_fma, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#endif
  EXPECT_FALSE(hypic::kernels::cpu_model().empty());
  EXPECT_FALSE(hypic::kernels::cpu_isa_summary().empty());
}

TEST(PeakLoops, ComputeTheirClosedFormOrAreRefusedByName) {
  int ran = 0;
  for (const PeakLoop loop : hypic::kernels::kPeakLoops) {
    std::string why;
    const std::string name = hypic::kernels::peak_loop_name(loop);
    if (!hypic::kernels::peak_loop_available(loop, &why)) {
      EXPECT_FALSE(why.empty()) << name;
      try {
        hypic::kernels::run_peak_loop(loop, 10);
        ADD_FAILURE() << name << " ran where it is not available";
      } catch (const hypic::Error& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
      continue;
    }
    ++ran;
    for (const int64_t n : {0, 1, 2, 7, 1000, 1001}) {
      const hypic::kernels::PeakLoopRun run = hypic::kernels::run_peak_loop(loop, n);
      EXPECT_EQ(run.checksum, run.expected) << name << " after " << n << " iterations";
      EXPECT_EQ(run.flops, hypic::kernels::peak_loop_flops_per_iteration(loop) * double(n));
    }
    // The two parities differ, so "the accumulators never changed" cannot pass.
    if (loop == PeakLoop::Avx2Fma || loop == PeakLoop::Avx512Fma) {
      EXPECT_NE(hypic::kernels::run_peak_loop(loop, 1).expected,
                hypic::kernels::run_peak_loop(loop, 2).expected);
    }
  }
#if defined(__x86_64__)
  EXPECT_GE(ran, 1) << "no peak loop runs on this x86-64 machine";
#endif
}

TEST(PeakLoops, MeasuredRatesArePositiveOnEveryThreadCount) {
  if (!hypic::kernels::peak_loop_available(PeakLoop::Avx2Fma))
    GTEST_SKIP() << "this CPU has no AVX2+FMA: the f32 peak loop cannot run";
  for (const int threads : {1, 2}) {
    const double g = hypic::bench::measure_peak_loop(PeakLoop::Avx2Fma, threads, 0.005, 1);
    EXPECT_TRUE(std::isfinite(g) && g > 0) << threads << " threads: " << g;
  }
  const hypic::bench::F32Peak peak = hypic::bench::measure_f32_peak(1, 0.005, 1);
  EXPECT_FALSE(peak.loop.empty());
  EXPECT_GT(peak.gflops, 0);
}

TEST(BenchPeakCli, WritesARowPerLoopWithTheCpuNamed) {
  const test_util::TempDir dir("hypic-bench-peak");
  const std::string out = dir.file("peak.json");
  const cli_test::CliRun r = cli_test::run_hypic(
      dir.file(""), "bench peak --seconds 0.005 --reps 1 --thread-counts 1,2 --json " + out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CPU: " + hypic::kernels::cpu_model()), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(cli_test::slurp(out));
  EXPECT_EQ(j["cpu_model"], hypic::kernels::cpu_model());
  EXPECT_EQ(j["isa"], hypic::kernels::cpu_isa_summary());
  int rows_per_loop[4] = {};
  for (const auto& row : j["rates"]) {
    int index = -1;
    for (int i = 0; i < 4; ++i)
      if (row["loop"] == hypic::kernels::peak_loop_name(hypic::kernels::kPeakLoops[i])) index = i;
    ASSERT_GE(index, 0) << row.dump();
    ++rows_per_loop[index];
    const bool available = hypic::kernels::peak_loop_available(hypic::kernels::kPeakLoops[index]);
    EXPECT_EQ(row["available"], available);
    if (available) {
      EXPECT_GT(row["gflops"].get<double>(), 0);
    } else {
      EXPECT_FALSE(row["why_not"].get<std::string>().empty());
    }
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(rows_per_loop[i],
              hypic::kernels::peak_loop_available(hypic::kernels::kPeakLoops[i]) ? 2 : 1);

  cli_test::expect_one_line_error(cli_test::run_hypic(dir.file(""), "bench peak --thread-counts 0"),
                                  "--thread-counts");
}

// bench forward reports its rate against the f32 peak measured in the same run, with the CPU.
TEST(BenchPeakCli, ForwardReportsItsRateAgainstTheF32Peak) {
  const test_util::TempDir dir("hypic-bench-peak-fwd");
  const std::string model = dir.file("m"), out = dir.file("fwd.json");
  ASSERT_EQ(cli_test::run_hypic(dir.file(""),
                                "model init --arch qwen3_5 --preset tiny --seed 1 "
                                "--out " +
                                    model)
                .code,
            0);
  const cli_test::CliRun r = cli_test::run_hypic(
      dir.file(""), "bench forward --model " + model + " --tokens 16 --reps 1 --json " + out);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(cli_test::slurp(out));
  EXPECT_EQ(j["cpu_model"], hypic::kernels::cpu_model());
  EXPECT_EQ(j["isa"], hypic::kernels::cpu_isa_summary());
  if (!hypic::kernels::peak_loop_available(PeakLoop::Avx2Fma)) return;
  const double peak = j["f32_peak_gflops"].get<double>();
  EXPECT_GT(peak, 0);
  EXPECT_DOUBLE_EQ(j["fraction_of_peak"].get<double>(), j["achieved_gflops"].get<double>() / peak);
  EXPECT_NE(r.out.find("of the f32 FMA peak"), std::string::npos) << r.out;
}

}  // namespace cpu_peak_test
}  // namespace
