#pragma once
// Shared by the libFuzzer targets (tests/fuzz/CMakeLists.txt). A target feeds the bytes to
// one parser; hypic::Error is the expected answer to bad input and is swallowed. Anything
// else (a crash, a sanitizer report, another exception escaping, a leak, an allocation past
// libFuzzer's -malloc_limit_mb) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "hypic/error.hpp"

namespace hypic_fuzz {

// For the readers that take a path: the input is written to a file of this process's own
// (under TMPDIR), rewritten for each input and removed at exit.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/hypic-fuzz-" +
            std::to_string(::getpid()) + suffix;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) std::abort();  // the harness itself is broken: stop loudly
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    if (std::fclose(f) != 0) std::abort();
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The input cut at its first NUL byte: (before, after); no NUL: (all, "").
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data,
                                                                  size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

// Runs f(); hypic::Error (the parsers' answer to bad input) ends it quietly.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const hypic::Error&) {
  }
}

}  // namespace hypic_fuzz
