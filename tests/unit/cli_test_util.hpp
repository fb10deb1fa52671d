#pragma once
// Shared helpers for tests that run the built `hypic` binary (HYPIC_BINARY) as a user would
// and check its exit code, stdout and stderr.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cli_test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct CliRun {
  int code;
  std::string out, err;
};

// Runs a shell command with stdout and stderr captured through files in `dir`.
inline CliRun run_shell(const std::filesystem::path& dir, const std::string& command) {
  const std::filesystem::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = command + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {status, slurp(out), slurp(err)};
}

// Runs `hypic ARGS`.
inline CliRun run_hypic(const std::filesystem::path& dir, const std::string& args) {
  return run_shell(dir, std::string(HYPIC_BINARY) + " " + args);
}

// A refused input: non-zero exit and exactly one stderr line, "hypic: error: ...needle...".
inline void expect_one_line_error(const CliRun& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("hypic: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace cli_test
