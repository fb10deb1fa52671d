// Regression tests for what the fuzz targets (tests/fuzz) and the ASan/UBSan job found in the
// decoders of untrusted bytes: sizes whose product wraps, a file left open by a refusal, a
// null pointer handed to memcpy. Each failed before its fix.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cluster/messages.hpp"
#include "hypic/error.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer.hpp"
#include "store/entry.hpp"
#include "store/entry_record.hpp"

#include "error_of.hpp"
#include "temp_path.hpp"

namespace {
namespace decoder_bounds_test {
using test_util::error_of;
using test_util::TempDir;

// Little-endian bytes of a message, field by field.
class Bytes {
 public:
  template <class T>
  Bytes& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr int64_t kHuge = int64_t{1} << 62;  // 4 * (2^62 + 1) wraps to 4 in 64 bits

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string safetensors_with_header(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

TEST(DecoderBounds, RefusedSafetensorsFileIsClosed) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_file(path, safetensors_with_header("{not json", 0));
  const size_t before = open_descriptors();
  for (int i = 0; i < 20; ++i)
    EXPECT_NE(error_of([&] { hypic::model::SafetensorsFile f(path); }), "");
  EXPECT_EQ(open_descriptors(), before);
}

TEST(DecoderBounds, SafetensorsByteCountThatWrapsIsRefused) {
  TempDir dir;
  const std::string path = dir.file("wrap.safetensors");
  // 2^62 f32 values need 2^64 bytes, which wraps to the empty span [0, 0].
  write_file(path,
             safetensors_with_header(
                 R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0));
  const std::string message = error_of([&] { hypic::model::SafetensorsFile f(path); });
  EXPECT_NE(message.find("shape overflows"), std::string::npos) << message;
}

hypic::store::ArrayRecord record(uint32_t name_id, std::vector<int64_t> shape, uint64_t offset) {
  hypic::store::ArrayRecord r{};
  r.name_id = name_id;
  r.rank = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) r.shape[i] = shape[i];
  r.offset = offset;
  return r;
}

TEST(DecoderBounds, StoreEntryDecodes) {
  const std::vector<float> payload = {1, 2, 3, 4, 5, 6};
  hypic::store::Entry e;
  const std::string problem = hypic::store::decode_entry(
      7, {record(0, {2, 2}, 10), record(1, {2}, 14)}, {"attn/0/K", "attn/0/V"}, hypic::DType::F32,
      reinterpret_cast<const unsigned char*>(payload.data()), 10, 6, e);
  ASSERT_EQ(problem, "");
  EXPECT_EQ(e.n_tokens, 7);
  EXPECT_EQ(e.at("attn/0/K").shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(e.at("attn/0/V").data()[1], 6.0f);
}

TEST(DecoderBounds, StoreEntryShapeProductThatWrapsIsDamage) {
  const std::vector<float> payload = {1, 2, 3, 4};
  hypic::store::Entry e;
  const std::string problem =
      hypic::store::decode_entry(1, {record(0, {4, kHuge + 1}, 0)}, {"attn/0/K"}, hypic::DType::F32,
                                 reinterpret_cast<const unsigned char*>(payload.data()), 0, 4, e);
  EXPECT_NE(problem.find("lies outside the entry's payload"), std::string::npos) << problem;
}

TEST(DecoderBounds, StoreEntryOffsetPastTheEndIsDamage) {
  const std::vector<float> payload = {1, 2};
  hypic::store::Entry e;
  // offset - payload_offset + count wraps past 2^64 back into the payload.
  const std::string problem =
      hypic::store::decode_entry(1, {record(0, {2}, UINT64_MAX)}, {"x"}, hypic::DType::F32,
                                 reinterpret_cast<const unsigned char*>(payload.data()), 0, 2, e);
  EXPECT_NE(problem.find("lies outside"), std::string::npos) << problem;
}

TEST(DecoderBounds, StoreEntryWithOnlyEmptyArraysHasNoPayload) {
  hypic::store::Entry e;
  // The store passes a null payload for an entry of no elements (an empty vector's data()).
  EXPECT_EQ(hypic::store::decode_entry(0, {record(0, {4, 0, 8}, 0)}, {"linear/0/T"},
                                       hypic::DType::BF16, nullptr, 0, 0, e),
            "");
  EXPECT_EQ(e.at("linear/0/T").numel(), 0);
}

TEST(DecoderBounds, StoreEntryNamingAnArrayTwiceIsDamage) {
  const std::vector<float> payload = {1, 2};
  hypic::store::Entry e;
  const std::string problem = hypic::store::decode_entry(
      1, {record(0, {1}, 0), record(0, {1}, 1)}, {"x"}, hypic::DType::F32,
      reinterpret_cast<const unsigned char*>(payload.data()), 0, 2, e);
  EXPECT_NE(problem.find("twice"), std::string::npos) << problem;
}

std::string tokenizer_json(const std::string& vocab) {
  return R"({"model": {"type": "BPE", "vocab": )" + vocab +
         R"(, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})";
}

TEST(DecoderBounds, TokenizerIdOutsideTheTablesIsRefused) {
  // Valid as it is, so that the refusals below are about the ids alone.
  EXPECT_EQ(
      error_of([] { hypic::model::Tokenizer::from_json(tokenizer_json(R"({"a": 0})"), "t"); }), "");
  // A negative id wrote before the id tables, a fractional one overflowed its conversion to
  // int (both found by fuzz_tokenizer under UBSan), a huge one asked for gigabytes.
  for (const char* id : {"-9", "1.5", "2000000000"}) {
    const std::string message = error_of([&] {
      hypic::model::Tokenizer::from_json(
          tokenizer_json(std::string(R"({"a": 0, "b": )") + id + "}"), "t");
    });
    EXPECT_NE(message.find(std::string("has id ") + id), std::string::npos) << message;
  }
}

Bytes entry_message_head(uint32_t n_arrays) {
  Bytes b;
  b.put(uint32_t{0x45505948}).put(uint32_t{1}).put(int64_t{0}).put_string("k");
  b.put(int64_t{1}).put(n_arrays);
  return b;
}

TEST(DecoderBounds, EntryMessageCountPastItsBytesIsRefused) {
  // 2^62 values claim 2^64 bytes, which wraps to 0: refused before anything is allocated.
  Bytes b = entry_message_head(1);
  b.put_string("a").put(uint32_t{1}).put(kHuge).put(uint64_t(kHuge));
  const std::string message =
      error_of([&] { hypic::cluster::deserialize_entry(b.bytes().data(), b.bytes().size()); });
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST(DecoderBounds, EntryMessageShapeProductThatWrapsIsRefused) {
  Bytes b = entry_message_head(1);
  b.put_string("a").put(uint32_t{2}).put(int64_t{4}).put(kHuge + 1).put(uint64_t{4});
  for (int i = 0; i < 4; ++i) b.put(1.0f);
  const std::string message =
      error_of([&] { hypic::cluster::deserialize_entry(b.bytes().data(), b.bytes().size()); });
  EXPECT_NE(message.find("shape"), std::string::npos) << message;
}

TEST(DecoderBounds, CommandTokenCountPastItsBytesIsRefused) {
  Bytes b;
  b.put(uint32_t{0x43505948}).put(uint32_t{1}).put(int64_t{0}).put_string("k");
  b.put(uint64_t(kHuge)).put(int32_t{1});
  const std::string message =
      error_of([&] { hypic::cluster::deserialize_command(b.bytes().data(), b.bytes().size()); });
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

}  // namespace decoder_bounds_test
}  // namespace
