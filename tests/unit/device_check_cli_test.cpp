// scripts/device_check.sh's orchestration without a GPU: its dry run (GPU steps echoed, the
// roofline computed for real) writes every row and every step's tail; the global deadline stops
// a step at its bound and skips the later ones with a row each; with no GPU visible and no
// --dry-run it fails at once with one row saying why; a run killed from outside keeps its rows.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "temp_path.hpp"

namespace {
namespace device_check_cli_test {

std::string script() {
  return std::string(HYPIC_TEST_DATA_DIR) + "/../../scripts/device_check.sh";
}

// The dry run with the hypic binary of this build and a throw-away build folder.
cli_test::CliRun dry_run(test_util::TempDir& tmp, const std::string& env) {
  return cli_test::run_shell(tmp.file(""), env + " DEVICE_CHECK_BUILD=" + tmp.file("build") +
                                               " DEVICE_CHECK_HYPIC=" + HYPIC_BINARY + " bash " +
                                               script() + " --dry-run " + tmp.file("report"));
}

TEST(DeviceCheckScript, DryRunWritesEveryRowAndTail) {
  test_util::TempDir tmp("hypic-device-check");
  const cli_test::CliRun r = dry_run(tmp, "");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string md = cli_test::slurp(tmp.file("report/device_check.md"));
  // Every row in order, each as it finished (the console echoes the same rows).
  size_t at = 0;
  for (const std::string label :
       {"| GPU visible | DRY |", "| configure (sm_90) | DRY |",
        "| build hypic hypic_unit_tests | DRY |", "| roofline 32k cold prefill (35B-A3B) | PASS |",
        "| op harness + device forward | DRY |", "| real-shape ops vs host (4096 tokens) | DRY |",
        "| forward vs host: qwen3_5 | DRY |", "| forward vs host: kimi_linear |",
        "| forward vs host: bailing_moe_linear |", "| forward vs host: minimax |",
        "| bench forward (bench preset, 4096) | DRY |",
        "| cold 32k prefill (35B-A3B, 4/40 layers) | DRY |", "| bench ttft (16 x 512) | DRY |",
        "| golden + cache contract + PIC (cuda) | DRY |",
        "| compute-sanitizer memcheck (small shapes) | DRY |",
        "| compute-sanitizer racecheck (small shapes) | DRY |",
        "| rank invariance, NCCL entries | SKIP | 0 | not run: DEVICE_CHECK_MPI=1 adds them",
        "| total | PASS |"}) {
    const size_t pos = md.find(label, at);
    ASSERT_NE(pos, std::string::npos) << label << " (after offset " << at << ")\n" << md;
    at = pos;
  }
  EXPECT_NE(r.out.find("device_check: roofline 32k cold prefill"), std::string::npos) << r.out;
  // The roofline really ran (the host's arithmetic), on the table's H100 row.
  EXPECT_NE(md.find("at 989 TFLOP/s, 3350 GB/s"), std::string::npos) << md;
  EXPECT_TRUE(std::filesystem::exists(tmp.file("report/roofline_32k.json")));
  // A tail per step; the echoed command names what would run.
  for (const std::string s :
       {"configure", "build", "roofline", "op_harness", "real_shapes", "arch_forward", "model_init",
        "bench_forward", "cold_32k", "bench_ttft", "golden_pic", "memcheck", "racecheck"})
    EXPECT_TRUE(std::filesystem::exists(tmp.file("report/tails/" + s + ".txt"))) << s;
  EXPECT_NE(cli_test::slurp(tmp.file("report/tails/real_shapes.txt"))
                .find("HYPIC_REAL_SHAPES=1 " + tmp.file("build") + "/tests/hypic_unit_tests"),
            std::string::npos);
  EXPECT_NE(cli_test::slurp(tmp.file("report/tails/memcheck.txt"))
                .find("HYPIC_CUDA_SYNC_DEBUG=1 compute-sanitizer --tool memcheck"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("report/running.txt")));
}

TEST(DeviceCheckScript, DeadlineStopsAStepAndSkipsTheRest) {
  test_util::TempDir tmp("hypic-device-check");
  // 9 s in all, each echoed step sleeping 8 s: configure gets at most 9 − 3 (kill grace) = 6 s
  // and is stopped there; nothing else may start.
  const cli_test::CliRun r = dry_run(tmp, "DEVICE_CHECK_BUDGET=9 DEVICE_CHECK_DRY_SLEEP=8");
  EXPECT_NE(r.code, 0);
  const std::string md = cli_test::slurp(tmp.file("report/device_check.md"));
  // (6 s, or 5 when the clock's second turned before configure started)
  EXPECT_NE(md.find("| configure (sm_90) | TIMEOUT |"), std::string::npos) << md;
  EXPECT_NE(md.find("stopped at its bound of"), std::string::npos) << md;
  EXPECT_NE(cli_test::slurp(tmp.file("report/tails/configure.txt"))
                .find("configure ran past its bound of"),
            std::string::npos);
  for (const std::string label :
       {"| build hypic hypic_unit_tests | SKIP | 0 | not started: the configure step failed",
        "| roofline 32k cold prefill (35B-A3B) | SKIP | 0 | skipped: out of time",
        "| forward vs host: minimax | SKIP | 0 | skipped: out of time",
        "| bench forward (bench preset, 4096) | SKIP | 0 | skipped: out of time",
        "| compute-sanitizer racecheck (small shapes) | SKIP | 0 | skipped: out of time",
        "| total | FAIL |"})
    EXPECT_NE(md.find(label), std::string::npos) << label << "\n" << md;
  EXPECT_NE(md.find("exit status 1"), std::string::npos) << md;
}

// A run stopped from outside (the device tool's limit) still leaves the finished rows, a KILLED
// row for the running step with its tail, and the total.
TEST(DeviceCheckScript, AKilledRunStillLeavesItsRows) {
  test_util::TempDir tmp("hypic-device-check");
  const cli_test::CliRun r = cli_test::run_shell(
      tmp.file(""), "{ DEVICE_CHECK_DRY_SLEEP=30 DEVICE_CHECK_BUILD=" + tmp.file("build") +
                        " bash " + script() + " --dry-run " + tmp.file("report") +
                        " & p=$!; sleep 2; kill -TERM $p; wait $p; }");
  EXPECT_NE(r.code, 0);
  const std::string md = cli_test::slurp(tmp.file("report/device_check.md"));
  EXPECT_NE(md.find("| GPU visible | DRY |"), std::string::npos) << md;
  EXPECT_NE(md.find("| configure | KILLED |"), std::string::npos) << md;
  EXPECT_NE(md.find("| total | FAIL |"), std::string::npos) << md;
  EXPECT_NE(cli_test::slurp(tmp.file("report/tails/configure.txt")).find("dry run: cmake"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmp.file("report/running.txt")));
}

TEST(DeviceCheckScript, WithoutAGpuItFailsAtOnce) {
  test_util::TempDir tmp("hypic-device-check");
  if (cli_test::run_shell(tmp.file(""), "nvidia-smi -L | grep -q '^GPU'").code == 0)
    GTEST_SKIP() << "a GPU is visible here";
  const cli_test::CliRun r =
      cli_test::run_shell(tmp.file(""), "DEVICE_CHECK_BUILD=" + tmp.file("build") + " bash " +
                                            script() + " " + tmp.file("report"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("device_check: FAIL: no GPU visible"), std::string::npos) << r.err;
  const std::string md = cli_test::slurp(tmp.file("report/device_check.md"));
  EXPECT_NE(md.find("| GPU visible | FAIL |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| configure"), std::string::npos) << md;  // nothing else was started
  // Bad arguments: one line, exit 2.
  const cli_test::CliRun bad = cli_test::run_shell(tmp.file(""), "bash " + script() + " --gpu");
  EXPECT_EQ(WEXITSTATUS(bad.code), 2);
  EXPECT_NE(bad.err.find("unknown option --gpu"), std::string::npos) << bad.err;
}

}  // namespace device_check_cli_test
}  // namespace
