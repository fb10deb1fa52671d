#pragma once
// A segment entry as the store sees it: a token count and a set of named float arrays.
// The store is generic over the arrays: the engine names them ("linear/3/T", "linear/3/S",
// "linear/3/conv", "attn/7/K", "attn/7/V", ...) and the store keeps names and shapes.
// Also: the stored element types (f32, bf16, f16) with their conversions, and the key.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hypic/tensor.hpp"

namespace hypic::store {

struct Entry {
  int64_t n_tokens = 0;
  std::map<std::string, Tensor> arrays;  // ordered by name: the stored order

  size_t element_count() const;
  // The array `name`; throws hypic::Error listing the names there are.
  const Tensor& at(const std::string& name) const;
};

// An entry's arrays by reference, so that put() writes them from the caller's own buffers
// (pic::store_view) instead of from copies gathered into an Entry; they must stay alive
// during the call.
struct ArrayView {
  std::vector<int64_t> shape;
  const float* data = nullptr;
  int64_t numel() const;
};
struct EntryView {
  int64_t n_tokens = 0;
  std::map<std::string, ArrayView> arrays;  // ordered by name: the stored order
  size_t element_count() const;
};
EntryView view_of(const Entry& entry);

// Element type of a store's payload: DType::F32, BF16 or F16 (hypic/tensor.hpp). Every array
// is converted on write and read back as f32. The file records dtype_name(dtype) ("f32",
// "bf16", "f16") and dtype_size(dtype) bytes per element.
// Parses "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16"; throws naming the choices.
DType parse_dtype(const std::string& text);

// Round-to-nearest-even conversions. NaN stays NaN (quiet), overflow becomes infinity,
// f16 keeps subnormals.
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);

// Converts n floats into the stored representation (little-endian bytes, n * dtype_size).
void encode(DType dtype, const float* src, size_t n, void* dst);
void decode(DType dtype, const void* src, size_t n, float* dst);
// x ← decode(encode(x)) for n floats, in one pass and in place: what the store will return.
void round_in_place(DType dtype, float* x, size_t n);

// The key of the entry for `tokens` computed by the model `model_fingerprint` with junction
// width `junction`: FNV-1a 128 (checksum.hpp) over
//   "hypic.segment.v1" | u64 len(fingerprint) | fingerprint | i64 junction |
//   u64 len(tokens) | tokens as i32,
// integers little-endian; returned as 32 lowercase hex digits.
std::string entry_key(const std::string& model_fingerprint, const std::vector<int32_t>& tokens,
                      int junction);

// The kind an array name belongs to, for byte accounting: first and last path components
// ("linear/3/T" -> "linear/T", "attn/7/K" -> "attn/K"); a name without '/' is its own kind.
std::string array_kind(const std::string& name);

}  // namespace hypic::store
