// The HDF5 RAII layer: round trips of every element type, chunked growth, attributes,
// MPI-IO access, errors that name the file and the object, and writes HDF5 cannot complete.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "store/hdf5.hpp"

#include "temp_path.hpp"

namespace {
namespace hdf5_test {
using test_util::TempPath;

namespace fs = std::filesystem;
using hypic::h5::Access;
using hypic::h5::Dataset;
using hypic::h5::File;

TEST(Hdf5, WriteF32DatasetRoundTripsAndOverwrites) {
  TempPath path("hdf5-f32");
  std::vector<float> data(2 * 3 * 4);
  std::iota(data.begin(), data.end(), -3.5f);
  hypic::h5::write_f32_dataset(path.str(), "forward/logits", data.data(), {2, 3, 4});
  auto back = hypic::h5::read_f32_dataset(path.str(), "forward/logits");
  EXPECT_EQ(back.shape, (hypic::h5::Shape{2, 3, 4}));
  EXPECT_EQ(back.data, data);

  // Writing again replaces the file: the old dataset is gone.
  float one = 7.0f;
  hypic::h5::write_f32_dataset(path.str(), "x", &one, {1});
  File file = File::open(path.str(), Access::kReadOnly);
  EXPECT_FALSE(file.exists("forward/logits"));
  EXPECT_TRUE(file.exists("x"));
  EXPECT_EQ(file.open_dataset("x").read_all<float>(), std::vector<float>{7.0f});
}

TEST(Hdf5, IntegerDatasetsAndTypeChecks) {
  TempPath path("hdf5-int");
  std::vector<int32_t> i32 = {-1, 0, 1, 2147483647};
  std::vector<int64_t> i64 = {-(int64_t{1} << 40), 5};
  std::vector<uint8_t> u8 = {0, 7, 255};
  {
    File file = File::create(path.str());
    file.create_dataset<int32_t>("a/i32", {2, 2}).write(i32.data());
    file.create_dataset<int64_t>("a/i64", {2}).write(i64.data());
    file.create_dataset<uint8_t>("u8", {3}).write(u8.data());
    file.close();
  }
  File file = File::open(path.str(), Access::kReadOnly);
  Dataset d32 = file.open_dataset("a/i32");
  EXPECT_TRUE(d32.holds<int32_t>());
  EXPECT_FALSE(d32.holds<float>());
  EXPECT_FALSE(d32.holds<uint32_t>());
  EXPECT_EQ(d32.read_all<int32_t>(), i32);
  EXPECT_EQ(file.open_dataset("a/i64").read_all<int64_t>(), i64);
  EXPECT_EQ(file.open_dataset("u8").read_all<uint8_t>(), u8);
  EXPECT_TRUE(file.open_group("a").exists("i64"));
  EXPECT_FALSE(file.exists("a/nothing/deeper"));
}

TEST(Hdf5, ChunkedDatasetGrowsAndReadsSlabs) {
  TempPath path("hdf5-chunk");
  File file = File::create(path.str());
  hypic::h5::DatasetOptions options;
  options.chunk = {4, 3};
  options.max_shape = {hypic::h5::kUnlimited, 3};
  Dataset rows = file.create_dataset<float>("rows", {0, 3}, options);
  for (int r = 0; r < 10; ++r) {
    rows.resize({hsize_t(r + 1), 3});
    float row[3] = {float(r), float(r) + 0.5f, float(-r)};
    rows.write_slab<float>({hsize_t(r), 0}, {1, 3}, row);
  }
  EXPECT_EQ(rows.shape(), (hypic::h5::Shape{10, 3}));
  float got[2 * 2];
  rows.read_slab<float>({7, 1}, {2, 2}, got);
  EXPECT_EQ(got[0], 7.5f);
  EXPECT_EQ(got[1], -7.0f);
  EXPECT_EQ(got[2], 8.5f);
  EXPECT_EQ(got[3], -8.0f);
  // Outside the extent: an error naming the dataset, not an HDF5 stack dump.
  try {
    rows.read_slab<float>({9, 0}, {2, 3}, got);
    FAIL() << "expected an error";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'/rows'"), std::string::npos) << e.what();
  }
}

TEST(Hdf5, AttributesOfEveryKind) {
  TempPath path("hdf5-attr");
  {
    File file = File::create(path.str());
    file.set_string_attribute("model", "qwen3-next-tiny");
    file.set_int_attribute("junction", 8);
    file.set_double_attribute("scale", 0.125);
    file.set_int_attribute("junction", 16);  // replacing is allowed
    Dataset d = file.create_dataset<int64_t>("d", {1});
    d.set_string_attribute("unit", "tokens");
  }
  File file = File::open(path.str(), Access::kReadOnly);
  EXPECT_EQ(file.string_attribute("model"), "qwen3-next-tiny");
  EXPECT_EQ(file.int_attribute("junction"), 16);
  EXPECT_DOUBLE_EQ(file.double_attribute("scale"), 0.125);
  EXPECT_EQ(file.open_dataset("d").string_attribute("unit"), "tokens");
  EXPECT_FALSE(file.has_attribute("absent"));
  try {
    file.string_attribute("absent");
    FAIL() << "expected an error";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path.str()), std::string::npos);
  }
}

TEST(Hdf5, ErrorsNameTheFileAndObject) {
  TempPath path("hdf5-missing");
  try {
    File::open(path.str(), Access::kReadOnly);
    FAIL() << "expected an error";
  } catch (const hypic::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path.str()), std::string::npos) << what;
  }
  File file = File::create(path.str());
  try {
    file.open_dataset("no/such/dataset");
    FAIL() << "expected an error";
  } catch (const hypic::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("/no/such/dataset"), std::string::npos) << what;
    EXPECT_NE(what.find(path.str()), std::string::npos) << what;
  }
}

TEST(Hdf5, HandlesAreMoveOnly) {
  static_assert(!std::is_copy_constructible_v<File>);
  static_assert(!std::is_copy_constructible_v<Dataset>);
  static_assert(std::is_nothrow_move_constructible_v<hypic::h5::Handle>);
  TempPath path("hdf5-move");
  File a = File::create(path.str());
  File b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(b.valid());
  b.create_dataset<float>("x", {1});
  b.close();
  EXPECT_FALSE(b.valid());
}

TEST(Hdf5, MpiIoAccessOnSelfCommunicator) {
  TempPath path("hdf5-mpio");
  hypic::h5::FileOptions options;
  options.comm = MPI_COMM_SELF;
  {
    File file = File::create(path.str(), options);
    std::vector<float> v = {1, 2, 3};
    file.create_dataset<float>("v", {3}).write(v.data());
    file.set_string_attribute("via", "mpio");
  }
  File file = File::open(path.str(), Access::kReadOnly, options);
  EXPECT_EQ(file.open_dataset("v").read_all<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(file.string_attribute("via"), "mpio");
}

// ---- writes HDF5 cannot complete (store/hdf5.hpp) ----

// A file with one empty extendible float dataset "x", written in the format the store uses.
void make_growable(const std::string& path) {
  hypic::h5::FileOptions options;
  options.latest_format = true;
  File file = File::create(path, options);
  hypic::h5::DatasetOptions grow;
  grow.chunk = {16384};
  grow.max_shape = {hypic::h5::kUnlimited};
  file.create_dataset<float>("x", {0}, grow);
  file.close();
}

// Runs `body` in a child process whose file-size limit is `limit` bytes (SIGXFSZ ignored, as
// the hypic command does), then HDF5's own teardown (H5close: what MPI_Finalize runs for
// parallel HDF5); returns the child's wait status. The child exits with body's result, or
// with 9 when the teardown reports an error.
int run_limited(rlim_t limit, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit rl = {limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(8);
    const int code = body();
    _exit(code != 0 ? code : (H5close() < 0 ? 9 : 0));
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// 4 MiB past a limit 64 KiB above the file's size: the write fails inside HDF5 (EFBIG).
// Returns 0 when it did.
int write_past_limit(Dataset& x) {
  std::vector<float> data(1 << 20, 1.0f);
  try {
    x.resize({data.size()});
    x.write_slab<float>({0}, {data.size()}, data.data());
    return 2;  // no error: the limit did not bite
  } catch (const hypic::Error&) {
    return 0;
  }
}

TEST(Hdf5, WriteThatCannotCompleteStillClosesEveryObject) {
  // Before: the dataset's and the file's closes failed again on what HDF5 could not write, left
  // their ids registered on freed objects, and the teardown crashed (SIGSEGV in H5F__close_cb).
  TempPath path("hdf5-efbig");
  make_growable(path.str());
  const auto limit = static_cast<rlim_t>(fs::file_size(path.str()) + 65536);
  const int status = run_limited(limit, [&] {
    {
      hypic::h5::FileOptions options;
      options.latest_format = true;
      options.swmr_write = true;
      File file = File::open(path.str(), Access::kReadWrite, options);
      Dataset x = file.open_dataset("x");
      if (int code = write_past_limit(x)) return code;
      // x, then the file, closed here by their destructors.
    }
    if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) return 3;
    if (hypic::h5::unreleased_object_seen()) return 4;
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
  // What was written before the failure is still there (the status flags a SWMR writer
  // leaves, as after a kill -9, cleared).
  hypic::h5::FileOptions options;
  options.clear_status_flags = true;
  File file = File::open(path.str(), Access::kReadOnly, options);
  EXPECT_TRUE(file.exists("x"));
}

TEST(Hdf5, CloseReportsWhatCouldNotBeWritten) {
  TempPath path("hdf5-efbig-close");
  make_growable(path.str());
  const auto limit = static_cast<rlim_t>(fs::file_size(path.str()) + 65536);
  const int status = run_limited(limit, [&] {
    hypic::h5::FileOptions options;
    options.latest_format = true;
    File file = File::open(path.str(), Access::kReadWrite, options);
    {
      Dataset x = file.open_dataset("x");
      if (int code = write_past_limit(x)) return code;
      // The file is closed while x is still open: x's close is then the file's last one.
      try {
        file.close();
        return 5;  // the failure was not reported
      } catch (const hypic::Error& e) {
        const std::string what = e.what();
        if (what.find("cannot write the rest of file '" + path.str() + "'") == std::string::npos)
          return 6;
      }
      if (file.valid()) return 7;
    }
    if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) return 3;
    if (hypic::h5::unreleased_object_seen()) return 4;
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe(status);
}

}  // namespace hdf5_test
}  // namespace
