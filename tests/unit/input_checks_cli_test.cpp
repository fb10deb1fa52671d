// Command lines and configs that make no sense are refused with one line (issue #17): an
// unknown command is named, negative counts are refused before any work, and a config whose
// context or end-of-sequence id is impossible is refused naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "temp_path.hpp"

namespace {
namespace input_checks_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using cli_test::expect_one_line_error;
using test_util::TempDir;

CliRun hypic(const TempDir& tmp, const std::string& args) {
  return cli_test::run_hypic(tmp.file(""), args);
}

TEST(InputChecksCli, UnknownCommandIsNamed) {
  TempDir tmp("hypic-input");
  CliRun r = hypic(tmp, "frobnicate");
  expect_one_line_error(r, "unknown command 'frobnicate'");
  EXPECT_NE(r.err.find("serve"), std::string::npos) << "lists the commands: " << r.err;
  r = hypic(tmp, "model frobnicate");
  expect_one_line_error(r, "unknown command 'frobnicate' for 'hypic model'");
  EXPECT_NE(r.err.find("init"), std::string::npos) << r.err;
  // A flag where a command is expected is not called a command.
  r = hypic(tmp, "model --frobnicate");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.err.find("unknown command"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // No command at all: CLI11's own words, on one line.
  expect_one_line_error(hypic(tmp, ""), "subcommand is required");
  // --help still prints the help and succeeds.
  r = hypic(tmp, "--help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("serve"), std::string::npos);
}

TEST(InputChecksCli, NegativeCountsAreRefused) {
  TempDir tmp("hypic-input");
  const std::string m = " --model " + tmp.file("model");
  expect_one_line_error(hypic(tmp, "warmup" + m + " --corpus c.jsonl --store s.h5 --ranks -1"),
                        "--ranks: must be a whole number, 0 or more, not '-1'");
  expect_one_line_error(hypic(tmp, "serve" + m + " --queries q.jsonl --out o --ranks -1"),
                        "--ranks");
  expect_one_line_error(hypic(tmp, "bench scaling --ranks -2"), "not '-2'");
  expect_one_line_error(
      hypic(tmp, "eval" + m + " --dataset hotpotqa --input x.json --out o --limit -3"),
      "--limit: must be a whole number, 0 or more, not '-3'");
  EXPECT_FALSE(fs::exists(tmp.file("o")));
  EXPECT_FALSE(fs::exists(tmp.file("s.h5")));
}

// --entry-tolerance (issue #47) is auto or a number >= 0, refused before anything loads or
// any file is made.
TEST(InputChecksCli, EntryToleranceIsCheckedFirst) {
  TempDir tmp("hypic-input");
  const std::string m = " --model " + tmp.file("model");
  expect_one_line_error(
      hypic(tmp, "warmup" + m + " --corpus c.jsonl --store s.h5 --entry-tolerance -1"),
      "--entry-tolerance '-1': expected auto or a number >= 0");
  expect_one_line_error(
      hypic(tmp, "serve" + m + " --queries q.jsonl --out o --entry-tolerance nan"),
      "--entry-tolerance 'nan'");
  expect_one_line_error(hypic(tmp, "eval" + m +
                                       " --dataset hotpotqa --input x.json --out o "
                                       "--entry-tolerance 0.1x"),
                        "--entry-tolerance '0.1x'");
  EXPECT_FALSE(fs::exists(tmp.file("o")));
  EXPECT_FALSE(fs::exists(tmp.file("s.h5")));
}

TEST(InputChecksCli, ImpossibleContextOrEosInConfigIsNamed) {
  TempDir tmp("hypic-input");
  ASSERT_EQ(
      hypic(tmp, "model init --arch qwen3_5 --preset tiny --seed 1 --out " + tmp.file("model"))
          .code,
      0);
  const std::string config_path = tmp.file("model") + "/config.json";
  std::ifstream in(config_path);
  const nlohmann::json good = nlohmann::json::parse(in);
  in.close();
  // qwen3_5 keeps the text fields under text_config.
  const char* section = good.contains("text_config") ? "text_config" : "";
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = good;
    (*section ? j[section] : j)[key] = value;
    std::ofstream(config_path) << j.dump(2);
  };
  with("max_position_embeddings", 0);
  expect_one_line_error(hypic(tmp, "model info --model " + tmp.file("model")),
                        "max_position_embeddings must be positive");
  with("eos_token_id", 512);
  expect_one_line_error(hypic(tmp, "model info --model " + tmp.file("model")),
                        "eos_token_id 512 is outside the vocabulary");
  with("eos_token_id", 7);
  EXPECT_EQ(hypic(tmp, "model info --model " + tmp.file("model")).code, 0);
}

}  // namespace input_checks_cli_test
}  // namespace
