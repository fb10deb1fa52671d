// Issue #50 through the built binary: config files too large to read, messages that name what is
// wrong once and in the user's own terms, a bounded --threads, commands that start without MPI
// or a re-exec, and a serve stopped by SIGTERM saying how far it got.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "store/hdf5.hpp"
#include "store/segment_store.hpp"
#include "temp_path.hpp"

namespace {
namespace hardening_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::expect_one_line_error;
using nlohmann::json;
using test_util::TempDir;

CliRun hypic(const TempDir& tmp, const std::string& args) {
  return cli_test::run_hypic(tmp.file(""), args);
}

size_t lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// A config.json of 17 MiB is refused by its size before it is read (a 1 GB one took 18 s and
// 3.3 GB); an invalid one names its path once.
TEST(HardeningCli, ConfigFileSizeAndInvalidJson) {
  TempDir tmp("hypic-harden");
  ASSERT_EQ(
      hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 1 --out " + tmp.file("m")).code,
      0);
  const std::string config = tmp.file("m") + "/config.json";
  const std::string good = cli_test::slurp(config);
  {
    std::ofstream out(config);
    out << good;
    out << std::string(17u << 20, ' ');
  }
  expect_one_line_error(hypic(tmp, "model info --model " + tmp.file("m")),
                        "more than the 16 MiB a config.json may hold");
  expect_one_line_error(hypic(tmp, "model info --config " + config),
                        "more than the 16 MiB a config.json may hold");
  std::ofstream(config) << "{ not json";
  const CliRun r = hypic(tmp, "model info --model " + tmp.file("m"));
  expect_one_line_error(r, "invalid JSON");
  size_t seen = 0;
  for (size_t at = r.err.find(config); at != std::string::npos; at = r.err.find(config, at + 1))
    ++seen;
  EXPECT_EQ(seen, 1u) << r.err;
  // 2e9 layers: named at once.
  json j = json::parse(good);
  json& text = j.contains("text_config") ? j["text_config"] : j;
  text.erase("layer_types");
  text["num_hidden_layers"] = 2000000000;
  std::ofstream(config) << j.dump();
  expect_one_line_error(hypic(tmp, "model info --config " + config),
                        "num_hidden_layers' is 2000000000, outside 0..4096");
}

TEST(HardeningCli, ThreadsAreBounded) {
  TempDir tmp("hypic-harden");
  expect_one_line_error(hypic(tmp, "bench kernels --threads 100000"), "100000");
  const CliRun r = hypic(tmp, "tokenize --text hi --threads 100000");
  expect_one_line_error(r, "--threads: must be a whole number from 0 to 1024");
  expect_one_line_error(hypic(tmp, "info --threads 5000"), "not '5000'");
  expect_one_line_error(cli_test::run_shell(tmp.file(""), "OMP_NUM_THREADS=100000 " +
                                                              std::string(HYPIC_BINARY) + " info"),
                        "OMP_NUM_THREADS=100000 is more than the 1024 threads");
}

// Messages in the user's terms: a junction share (was printed as its store code -2500), an id
// of 2^63 (was printed negative), another program's HDF5 file, a directory given as a store,
// a damaged fingerprint byte as \xNN.
TEST(HardeningCli, MessagesNameWhatIsWrongInTheUsersTerms) {
  TempDir tmp("hypic-harden");
  const std::string model = tmp.file("m");
  // Relative names below are inside tmp.
  auto hypic = [&tmp](const TempDir&, const std::string& args) {
    return cli_test::run_shell(
        tmp.file(""), "cd " + tmp.file("") + " && " + std::string(HYPIC_BINARY) + " " + args);
  };
  ASSERT_EQ(hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 2 --out " + model).code, 0);
  std::ofstream(tmp.file("corpus.jsonl")) << R"({"id": "d", "tokens": [1, 2, 3, 4, 5, 6]})"
                                          << "\n";
  const std::string m = " --model " + model + " --byte-tokenizer";
  CliRun r = hypic(tmp, "warmup" + m + " --corpus corpus.jsonl --store s.h5");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ofstream(tmp.file("q.jsonl")) << R"({"id": "q", "segments": ["d"], "question_tokens": [1]})"
                                     << "\n";
  expect_one_line_error(hypic(tmp, "serve" + m +
                                       " --corpus corpus.jsonl --queries q.jsonl --out o "
                                       "--store s.h5 --junction 0.25"),
                        "made with junction width 8 but this run asks for a junction share of "
                        "0.25; pass --junction 8");

  std::ofstream(tmp.file("big.jsonl"))
      << R"({"id": 9223372036854775808, "segments": ["d"], "question_tokens": [9223372036854775808]})"
      << "\n";
  r = hypic(tmp, "serve" + m + " --corpus corpus.jsonl --queries big.jsonl --out o2");
  expect_one_line_error(r, "token id 9223372036854775808 is outside the vocabulary");
  std::ofstream(tmp.file("ids.json")) << "[1, 18446744073709551615]";
  expect_one_line_error(hypic(tmp, "forward --model " + model + " --input-ids ids.json --out o3"),
                        "id 18446744073709551615 at position 1");

  // Another program's HDF5 file (the library's default, older format).
  {
    float x = 1;
    hypic::h5::write_f32_dataset(tmp.file("foreign.h5"), "x", &x, {1});
  }
  r = hypic(tmp, "inspect --store " + tmp.file("foreign.h5"));
  expect_one_line_error(r, "is not a hypic segment store");
  EXPECT_EQ(r.err.find("SWMR"), std::string::npos) << r.err;
  r = hypic(tmp, "inspect --store " + tmp.file(""));
  expect_one_line_error(r, "is a folder, not a regular file");

  // A flipped byte in the fingerprint: inspect shows it as \xNN (the header checksum fails
  // only under --verify).
  {
    hypic::h5::File f = hypic::h5::File::open(tmp.file("s.h5"), hypic::h5::Access::kReadWrite);
    std::string fp = f.string_attribute("model_fingerprint");
    fp[0] = '\x01';
    f.set_string_attribute("model_fingerprint", fp);
  }
  r = hypic(tmp, "inspect --store s.h5");
  EXPECT_NE(r.out.find("model          \\x01"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find('\x01'), std::string::npos) << r.out;

  // A model folder without a tokenizer names both files it could hold.
  std::ofstream(tmp.file("text.jsonl")) << R"({"id": "t", "text": "Some words."})"
                                        << "\n";
  expect_one_line_error(hypic(tmp, "warmup --model " + model + " --corpus text.jsonl --store t.h5"),
                        "no tokenizer.json (nor tiktoken.model");
}

// tokenize, model info and inspect start without MPI and without re-executing themselves
// (about a second before); the commands that run models still do both.
TEST(HardeningCli, LightCommandsSkipMpiAndTheReexec) {
  TempDir tmp("hypic-harden");
  const std::string env = cli_test::clean_mpi_environment() +
                          " env -u HYPIC_REEXEC -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "
                          "HYPIC_STARTUP_TRACE=1 " +
                          std::string(HYPIC_BINARY);
  const std::string tok = std::string(HYPIC_TEST_DATA_DIR) + "/tokenizer/tokenizer.json";
  const std::string light = "re-executed no, MPI initialised no";
  CliRun r = cli_test::run_shell(tmp.file(""), env + " tokenize --model " + tok + " --text hi");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(light), std::string::npos) << r.err;
  r = cli_test::run_shell(tmp.file(""), env + " --threads 1 model info --model " + tmp.file("x"));
  EXPECT_NE(r.err.find(light), std::string::npos) << r.err;
  r = cli_test::run_shell(tmp.file(""), env + " inspect --store " + tmp.file("none.h5"));
  EXPECT_NE(r.err.find(light), std::string::npos) << r.err;
  r = cli_test::run_shell(tmp.file(""), env + " info");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("re-executed yes, MPI initialised yes"), std::string::npos) << r.err;
}

// SIGTERM to a single-process serve: the query in progress is finished, then one line says
// how many were answered and that the store is committed; metrics.json records it.
TEST(HardeningCli, SigtermToServeSaysHowFarItGot) {
  TempDir tmp("hypic-harden");
  const std::string model = tmp.file("m");
  ASSERT_EQ(hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 2 --out " + model).code, 0);
  {
    std::ofstream corpus(tmp.file("corpus.jsonl")), q(tmp.file("q.jsonl"));
    for (int d = 0; d < 40; ++d) {
      json line = {{"id", "d" + std::to_string(d)}, {"tokens", json::array()}};
      for (int t = 0; t < 60; ++t) line["tokens"].push_back((d * 31 + t * 7) % 500);
      corpus << line.dump() << "\n";
    }
    for (int i = 0; i < 4000; ++i)
      q << json{{"id", "q" + std::to_string(i)},
                {"segments", {"d" + std::to_string(i % 40), "d" + std::to_string((i + 7) % 40)}},
                {"question_tokens", {1, 2, 3}},
                {"max_new_tokens", 2}}
               .dump()
        << "\n";
  }
  const std::string out = tmp.file("out");
  const std::string cmd = "cd " + tmp.file("") + " && (" + cli_test::clean_mpi_environment() + " " +
                          HYPIC_BINARY + " serve --model " + model +
                          " --byte-tokenizer --corpus corpus.jsonl --queries q.jsonl --out " + out +
                          " --store s.h5 > run.out 2> run.err & echo $! > pid)";
  ASSERT_EQ(cli_test::run_shell(tmp.file(""), cmd).code, 0);
  cli_test::KillOnExit guard(tmp.file("pid"));
  const long pid = std::stol(cli_test::slurp(tmp.file("pid")));
  // Wait for the first answers, then stop it.
  for (int i = 0; i < 600 && lines(cli_test::slurp(out + "/predictions.jsonl")) < 3; ++i)
    usleep(100000);
  ASSERT_GE(lines(cli_test::slurp(out + "/predictions.jsonl")), 3u);
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGTERM), 0);
  for (int i = 0; i < 600 && ::kill(static_cast<pid_t>(pid), 0) == 0; ++i) usleep(100000);
  const std::string err = cli_test::slurp(tmp.file("run.err"));
  EXPECT_NE(err.find("hypic: serve stopped by SIGTERM after answering "), std::string::npos) << err;
  EXPECT_NE(err.find("of 4000 queries"), std::string::npos) << err;
  EXPECT_NE(err.find("the store s.h5 is committed with"), std::string::npos) << err;
  EXPECT_EQ(lines(err), 1u) << err;
  const size_t answered = lines(cli_test::slurp(out + "/predictions.jsonl"));
  EXPECT_LT(answered, 4000u);
  EXPECT_NE(err.find("answering " + std::to_string(answered) + " of"), std::string::npos) << err;
  const json metrics = json::parse(cli_test::slurp(out + "/metrics.json"));
  EXPECT_EQ(metrics["interrupted"]["answered"].get<size_t>(), answered);
  EXPECT_EQ(metrics["interrupted"]["signal"], "SIGTERM");
  // The store is whole.
  const CliRun v = hypic(tmp, "inspect --store " + tmp.file("s.h5") + " --verify");
  EXPECT_EQ(v.code, 0) << v.err;
}

}  // namespace hardening_cli_test
}  // namespace

namespace {
namespace hardening_cli_test {
// `mpirun -n 2 ... --ranks 3`: every rank finds the mismatch; rank 0 says it once and all end
// without MPI_Abort (its banner and hypic's line twice before).
TEST(HardeningCli, WorldSizeMismatchIsOneLineWithoutAbort) {
  TempDir tmp("hypic-harden");
  const std::string model = tmp.file("m");
  ASSERT_EQ(hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 2 --out " + model).code, 0);
  std::ofstream(tmp.file("c.jsonl")) << R"({"id": "d", "tokens": [1, 2, 3, 4, 5, 6]})"
                                     << "\n";
  const CliRun r = cli_test::run_shell(
      tmp.file(""), cli_test::clean_mpi_environment() + " " + HYPIC_MPIEXEC +
                        " -n 2 --oversubscribe " + HYPIC_BINARY + " warmup --model " + model +
                        " --byte-tokenizer --corpus " + tmp.file("c.jsonl") + " --store " +
                        tmp.file("s.h5") + " --ranks 3");
  EXPECT_NE(r.code, 0);
  const std::string all = r.out + r.err;
  size_t lines_seen = 0;
  for (size_t at = all.find("hypic: error: asked for 3 ranks"); at != std::string::npos;
       at = all.find("hypic: error: asked for 3 ranks", at + 1))
    ++lines_seen;
  EXPECT_EQ(lines_seen, 1u) << all;
  EXPECT_EQ(all.find("MPI_ABORT"), std::string::npos) << all;
  EXPECT_FALSE(fs::exists(tmp.file("s.h5")));
}
}  // namespace hardening_cli_test
}  // namespace
