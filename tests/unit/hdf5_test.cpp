// The HDF5 RAII layer: round trips of every element type, chunked growth, attributes,
// MPI-IO access, and errors that name the file and the object.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "store/hdf5.hpp"

#include "temp_path.hpp"

namespace {
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

}  // namespace
