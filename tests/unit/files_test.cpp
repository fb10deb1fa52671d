// The file helpers of src/common/files.hpp (issue #50): the private scratch folder that chat's
// session stores and bench's temporary stores live in (mkdtemp, 0700, files made with
// O_EXCL | O_NOFOLLOW, removed at the end), input files that must be regular files, read
// errors that are not taken for the end of a file, and names that may join a path.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "common/files.hpp"
#include "common/units.hpp"
#include "hypic/error.hpp"
#include "temp_path.hpp"

namespace {
namespace files_test {
namespace fs = std::filesystem;
using test_util::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hypic::Error& e) {
    return e.what();
  }
  return "";
}

TEST(PrivateTempDir, IsAFreshFolderOnlyItsUserCanEnterAndGoesAway) {
  TempDir tmp("hypic-private");
  std::string kept;
  {
    hypic::PrivateTempDir a("hypic_chat", tmp.file("")), b("hypic_chat", tmp.file(""));
    kept = a.path();
    EXPECT_NE(a.path(), b.path());  // names nobody can predict, one per use
    EXPECT_EQ(fs::path(a.path()).parent_path(), fs::path(tmp.file("")).parent_path());
    struct stat st {};
    ASSERT_EQ(::lstat(a.path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    const std::string f = a.create_file("store-8.h5");
    ASSERT_EQ(::lstat(f.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_size, 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // The same name again, or a name leading out of the folder, is refused.
    EXPECT_NE(error_of([&] { a.create_file("store-8.h5"); }).find("File exists"),
              std::string::npos);
    EXPECT_NE(error_of([&] { a.create_file("../x.h5"); }).find("plain file name"),
              std::string::npos);
    EXPECT_NE(error_of([&] { a.create_file(".."); }).find("plain file name"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(kept));  // removed with what was in it
  EXPECT_TRUE(fs::is_empty(tmp.file("")));
}

TEST(PrivateTempDir, APlantedSymlinkIsNeitherFollowedNorRemovedThrough) {
  TempDir tmp("hypic-private");
  fs::create_directories(tmp.file("victim"));
  std::ofstream(tmp.file("victim/keep.txt")) << "another user's file\n";
  {
    hypic::PrivateTempDir d("hypic_chat", tmp.file(""));
    // A link planted under the name the store will get (only its owner or root can do so in
    // a 0700 folder): refused, and its target is not created.
    fs::create_symlink(tmp.file("victim/store-8.h5"), d.path() + "/store-8.h5");
    const std::string e = error_of([&] { d.create_file("store-8.h5"); });
    EXPECT_NE(e.find("cannot create temporary file"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(tmp.file("victim/store-8.h5")));
    // A link to a folder: removing the private folder removes the link, not the target.
    fs::create_directory_symlink(tmp.file("victim"), d.path() + "/dir");
  }
  EXPECT_TRUE(fs::exists(tmp.file("victim/keep.txt")));
}

TEST(PrivateTempDir, AMissingParentIsOneLine) {
  const std::string e = error_of([] { hypic::PrivateTempDir d("x", "/nonexistent/hypic-parent"); });
  EXPECT_NE(e.find("cannot make a private temporary folder in /nonexistent/hypic-parent"),
            std::string::npos)
      << e;
}

TEST(InputFiles, FoldersFifosAndDevicesAreNotRegularFiles) {
  TempDir tmp("hypic-files");
  std::ofstream(tmp.file("ok.txt")) << "text\n";
  EXPECT_EQ(hypic::read_regular_file(tmp.file("ok.txt"), "--corpus"), "text\n");
  EXPECT_NE(error_of([&] {
              hypic::require_regular_file(tmp.file(""), "--corpus");
            }).find("is a folder, not a regular file"),
            std::string::npos);
  ASSERT_EQ(::mkfifo(tmp.file("fifo").c_str(), 0600), 0);
  // Refused without opening it (an open would wait for a writer forever).
  EXPECT_NE(error_of([&] {
              hypic::read_regular_file(tmp.file("fifo"), "--queries");
            }).find("--queries " + tmp.file("fifo") + " is a FIFO"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hypic::read_regular_file("/dev/zero", "add");
            }).find("add /dev/zero is a character device, not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              hypic::require_regular_file(tmp.file("none"), "--corpus");
            }).find(": cannot open: No such file or directory"),
            std::string::npos);
}

TEST(InputFiles, AReadErrorIsNotTheEndOfTheFile) {
  // A folder opened as a stream reads nothing, with an error (EISDIR) rather than an end.
  TempDir tmp("hypic-files");
  std::ifstream in(tmp.file(""));
  std::string line;
  while (std::getline(in, line)) {
  }
  EXPECT_NE(error_of([&] { hypic::require_read_to_end(in, tmp.file("")); }).find("read error"),
            std::string::npos);
  std::ofstream(tmp.file("ok.jsonl")) << "{}\n{}\n";
  std::ifstream ok(tmp.file("ok.jsonl"));
  while (std::getline(ok, line)) {
  }
  EXPECT_EQ(error_of([&] { hypic::require_read_to_end(ok, tmp.file("ok.jsonl")); }), "");
}

TEST(InputFiles, NamesThatJoinAPathStayInTheirFolder) {
  for (const char* good : {"hotpotqa", "multifieldqa_en", "2wikimqa", "gov_report.v2", "a-b"})
    EXPECT_EQ(error_of([&] { hypic::require_plain_name(good, "--dataset"); }), "") << good;
  for (const char* bad : {"../../escape", "..", ".", "a/b", "/abs", ".hidden", "", "a b", "a\\b"})
    EXPECT_NE(error_of([&] {
                hypic::require_plain_name(bad, "--dataset");
              }).find("is used in a file name"),
              std::string::npos)
        << bad;
}

TEST(InputNumbers, MebibytesOutOfRangeAreRefusedNotWrapped) {
  EXPECT_EQ(hypic::mib_to_bytes(0, "--memory-budget"), 0u);
  EXPECT_EQ(hypic::mib_to_bytes(1024, "--memory-budget"), size_t(1) << 30);
  EXPECT_EQ(hypic::mib_to_bytes(0.5, "--memory-budget"), size_t(1) << 19);
  for (double bad : {std::numeric_limits<double>::infinity(), 1e308, -1.0, 2e13,
                     std::numeric_limits<double>::quiet_NaN()})
    EXPECT_NE(error_of([&] {
                hypic::mib_to_bytes(bad, "--memory-budget");
              }).find("--memory-budget must be a finite number of MiB from 0 to"),
              std::string::npos)
        << bad;
}

}  // namespace files_test
}  // namespace
