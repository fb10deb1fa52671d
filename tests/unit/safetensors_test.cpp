// safetensors reader and writer: dtype conversions, round trips, validation errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/safetensors.hpp"

#include "error_of.hpp"
#include "temp_path.hpp"

namespace {
namespace safetensors_test {
using test_util::error_of;
using test_util::read_bytes;
using test_util::TempDir;
namespace fs = std::filesystem;
using hypic::Tensor;
using namespace hypic::model;

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file written byte by byte, to test the reader independently of the writer.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Tensor sample(std::vector<int64_t> shape, float scale = 1.0f) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = scale * std::sin(0.37f * i + 0.1f) * (1 + i % 7);
  return t;
}

TEST(Safetensors, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(0x3fc0), 1.5f);
}

TEST(Safetensors, F16Conversions) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.5f), 0xc100);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                   // overflow to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0xc100), -2.5f);
  // Every finite half survives a round trip through f32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    EXPECT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Safetensors, RoundTripF32IsExact) {
  TempDir dir("hypic-st");
  const Tensor a = sample({3, 5}), b = sample({7}), c = sample({2, 1, 4});
  write_safetensors(dir.file("x.safetensors"), {{"b", &b}, {"a", &a}, {"c.w", &c}},
                    hypic::DType::F32);
  const SafetensorsFile f(dir.file("x.safetensors"));
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (auto [name, t] : {std::pair{"a", &a}, {"b", &b}, {"c.w", &c}}) {
    const Tensor r = f.read(name);
    EXPECT_EQ(r.shape(), t->shape()) << name;
    EXPECT_EQ(r.to_vector(), t->to_vector()) << name;
    EXPECT_EQ(f.info(name).dtype, hypic::DType::F32);
  }
}

TEST(Safetensors, RoundTripBf16AndF16MatchRoundedValues) {
  TempDir dir("hypic-st");
  const Tensor a = sample({4, 9}, 3.0f);
  for (hypic::DType d : {hypic::DType::BF16, hypic::DType::F16}) {
    const std::string p = dir.file(std::string(hypic::dtype_name(d)) + ".safetensors");
    write_safetensors(p, {{"a", &a}}, d);
    const SafetensorsFile f(p);
    EXPECT_EQ(f.info("a").dtype, d);
    const Tensor r = f.read("a");
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float want =
          d == hypic::DType::BF16 ? bf16_to_f32(f32_to_bf16(a[i])) : f16_to_f32(f32_to_f16(a[i]));
      EXPECT_EQ(r[i], want) << i;
    }
  }
}

TEST(Safetensors, WriterIsDeterministicAndAligned) {
  TempDir dir("hypic-st");
  const Tensor a = sample({3, 3}), b = sample({5});
  write_safetensors(dir.file("1.safetensors"), {{"a", &a}, {"b", &b}}, hypic::DType::BF16);
  write_safetensors(dir.file("2.safetensors"), {{"b", &b}, {"a", &a}}, hypic::DType::BF16);
  const std::string one = read_bytes(dir.file("1.safetensors"));
  EXPECT_EQ(one, read_bytes(dir.file("2.safetensors")));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(one[i]);
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(one.substr(8, n));
  EXPECT_EQ(header.at("__metadata__").at("format"), "pt");
  EXPECT_EQ(header.at("a").at("dtype"), "BF16");
}

TEST(Safetensors, ReadsIntegerTensors) {
  TempDir dir("hypic-st");
  // Hand-written file: an I64 tensor [3] and an I32 tensor [2].
  std::string data;
  for (int64_t v : {int64_t{5}, int64_t{-7}, int64_t{123456}})
    data.append(reinterpret_cast<const char*>(&v), 8);
  for (int32_t v : {int32_t{42}, int32_t{-1}}) data.append(reinterpret_cast<const char*>(&v), 4);
  const std::string header = R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},)"
                             R"("g":{"dtype":"I32","shape":[2],"data_offsets":[24,32]}})";
  spit(dir.file("i.safetensors"), raw_file(header, data));
  const SafetensorsFile f(dir.file("i.safetensors"));
  EXPECT_EQ(f.read_int32("ids"), (std::vector<int32_t>{5, -7, 123456}));
  EXPECT_EQ(f.read_int32("g"), (std::vector<int32_t>{42, -1}));
  EXPECT_NE(error_of([&] { f.read("ids"); }).find("I64"), std::string::npos);

  write_safetensors_int32(dir.file("w.safetensors"), {{"t", {{2, 2}, {1, 2, 3, 4}}}});
  const SafetensorsFile w(dir.file("w.safetensors"));
  EXPECT_EQ(w.read_int32("t"), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(w.info("t").shape, (std::vector<int64_t>{2, 2}));
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  TempDir dir("hypic-st");
  const Tensor a = sample({16, 16}), b = sample({16});
  const std::string p = dir.file("t.safetensors");
  write_safetensors(p, {{"first", &a}, {"second", &b}}, hypic::DType::F32);
  fs::resize_file(p, fs::file_size(p) - 10);  // cuts into "second", the last in the file
  const std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("'second'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  fs::resize_file(p, 5);  // not even a header length
  EXPECT_NE(error_of([&] { SafetensorsFile f(p); }).find("truncated"), std::string::npos);
}

TEST(Safetensors, RejectsInconsistentHeaders) {
  TempDir dir("hypic-st");
  const std::string p = dir.file("bad.safetensors");
  // Size disagrees with shape x dtype.
  spit(p, raw_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
                   std::string(12, '\0')));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16 bytes"), std::string::npos) << msg;
  // Unknown dtype.
  spit(p, raw_file(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})",
                   std::string(2, '\0')));
  EXPECT_NE(error_of([&] { SafetensorsFile f(p); }).find("F8_E4M3"), std::string::npos);
  // Header that is not JSON.
  spit(p, raw_file("{not json", ""));
  EXPECT_NE(error_of([&] { SafetensorsFile f(p); }).find("invalid safetensors header"),
            std::string::npos);
  // Header length beyond the file.
  std::string bytes = raw_file("{}", "");
  bytes[0] = 100;
  spit(p, bytes);
  EXPECT_NE(error_of([&] { SafetensorsFile f(p); }).find("truncated"), std::string::npos);
}

TEST(Safetensors, RefusesOverlappingAndOutOfFileOffsets) {
  TempDir dir("hypic-st");
  const std::string p = dir.file("overlap.safetensors");
  // "b" reads the second half of "a": both tensors would share bytes.
  spit(p, raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                   std::string(16, '\0')));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // The same with the overlapping tensor listed first and starting first.
  spit(p, raw_file(R"({"z":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                   R"("y":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})",
                   std::string(20, '\0')));
  msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'z'"), std::string::npos) << msg;
  // Two tensors on exactly the same bytes.
  spit(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                   std::string(8, '\0')));
  EXPECT_NE(error_of([&] { SafetensorsFile f(p); }).find("overlap"), std::string::npos);
  // Out of the file: past the end of the data.
  spit(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                   std::string(8, '\0')));
  msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ends at data byte 24"), std::string::npos) << msg;
  // Neighbours that touch, in any order, and empty tensors load.
  spit(p, raw_file(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                   R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                   std::string(16, '\0')));
  EXPECT_EQ(error_of([&] { SafetensorsFile f(p); }), "");
}

TEST(Safetensors, RefusesInvertedOffsetsAndHoles) {
  TempDir dir("hypic-st");
  const std::string p = dir.file("holes.safetensors");
  // Begin after end.
  spit(p,
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')));
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("'a': data_offsets end before they begin"), std::string::npos) << msg;
  // A hole before the first tensor, between two tensors, and after the last one.
  spit(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   std::string(12, '\0')));
  msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("data bytes 0..4 (before tensor 'a') belong to no tensor"), std::string::npos)
      << msg;
  spit(p, raw_file(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
                   R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                   std::string(20, '\0')));
  msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("data bytes 8..12 (before tensor 'b')"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  spit(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                   std::string(11, '\0')));
  msg = error_of([&] { SafetensorsFile f(p); });
  EXPECT_NE(msg.find("the last 3 bytes of tensor data (from data byte 8) belong to no tensor"),
            std::string::npos)
      << msg;
}

TEST(Safetensors, ShardedIndexIsOneNameSpace) {
  TempDir dir("hypic-st");
  const Tensor a = sample({2, 3}), b = sample({4});
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", &a}}, hypic::DType::F32);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"b", &b}}, hypic::DType::BF16);
  spit(dir.file("model.safetensors.index.json"),
       R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
       R"("b":"model-00002-of-00002.safetensors"}})");
  const SafetensorsCheckpoint ck(fs::path(dir.file("x")).parent_path().string());
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.read("a").to_vector(), a.to_vector());
  EXPECT_EQ(ck.info("b").dtype, hypic::DType::BF16);
  EXPECT_NE(ck.file_of("b").find("00002"), std::string::npos);

  // An index entry pointing at a shard that lacks the tensor.
  spit(dir.file("model.safetensors.index.json"),
       R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  const std::string msg =
      error_of([&] { SafetensorsCheckpoint c(fs::path(dir.file("x")).parent_path().string()); });
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
}

}  // namespace safetensors_test
}  // namespace
