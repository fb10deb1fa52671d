#pragma once
// Scratch files and folders for tests, removed when they go out of scope.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace test_util {

// A fresh folder named after the running test, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "hypic") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A fresh .h5 file name under the system temp folder, removed at scope end.
class TempPath {
 public:
  explicit TempPath(const std::string& stem) {
    path_ = (std::filesystem::temp_directory_path() /
             (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + ".h5"))
                .string();
    std::filesystem::remove(path_);
  }
  ~TempPath() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::string& str() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// The whole file as bytes.
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace test_util
