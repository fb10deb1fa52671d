#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets}, then the raw little-endian tensor bytes.
//
// Floating-point tensors (BF16, F16, F32) are read as f32; integer tensors (I32, I64) are
// readable as int32 for reference files. Every offset and size in the header is checked
// against the file when it is opened, so a truncated file fails before anything is read.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hypic/tensor.hpp"

namespace hypic::model {

// Element types are hypic::DType (hypic/tensor.hpp: dtype_size, dtype_is_float, and
// dtype_name for the lowercase "f32"); the file format spells them "F32", "BF16", ...
const char* safetensors_dtype_name(DType d);
// Parses "f32" / "bf16" / "f16" (either case, also "float32", "bfloat16", "float16");
// throws hypic::Error otherwise.
DType parse_dtype(const std::string& s);

// Conversions used by the reader and the writer.
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  // round to nearest, ties to even; NaN stays NaN
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest, ties to even

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets inside the data area (after the header)
  uint64_t end = 0;
  int64_t numel() const;
  std::string shape_str() const;
};

std::string shape_to_string(const std::vector<int64_t>& shape);

// One .safetensors file. The header is parsed and validated on open; the file is then
// memory-mapped read-only, so a tensor's bytes are read in place (bytes()) with no copy, and
// release() hands its pages back once converted: loading a checkpoint never holds more than
// the weights plus one tensor's pages.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws when absent

  // A floating-point tensor converted to f32 (throws for integer dtypes).
  Tensor read(const std::string& name) const;
  // An integer tensor (I32 or I64) as int32 values (throws when a value does not fit).
  std::vector<int32_t> read_int32(const std::string& name) const;
  // The raw little-endian bytes of a tensor.
  std::vector<unsigned char> read_bytes(const std::string& name) const;
  // The tensor's bytes in the mapped file (valid while this object lives; none for an empty
  // tensor), and the hint that they will not be read again (their pages leave the resident set).
  const unsigned char* bytes(const std::string& name) const;
  void release(const std::string& name) const;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  const unsigned char* map_ = nullptr;  // the whole file, read-only
  uint64_t map_size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint's weights: model.safetensors, or the shards listed in
// model.safetensors.index.json (weight_map), seen as one name -> tensor map.
class SafetensorsCheckpoint {
 public:
  // dir holds model.safetensors or model.safetensors.index.json (the single file wins
  // when both are present). Throws hypic::Error when neither exists or a shard is bad.
  explicit SafetensorsCheckpoint(const std::string& dir);

  bool sharded() const { return files_.size() > 1 || !index_path_.empty(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;  // path of the holding file
  Tensor read(const std::string& name) const;
  std::vector<int32_t> read_int32(const std::string& name) const;
  // In place, as SafetensorsFile::bytes / release.
  const unsigned char* bytes(const std::string& name) const;
  void release(const std::string& name) const;

 private:
  std::string index_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes tensors to a safetensors file. Floating tensors are stored in `dtype` (F32, BF16
// or F16). The header carries __metadata__ {"format": "pt"} (plus `metadata`), tensors
// are laid out in name order, so the output is byte-identical for identical input.
struct NamedTensor {
  std::string name;
  const Tensor* tensor;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata = {});

// Streaming form: shapes are known up front and `produce(i)` returns tensor i when its
// turn comes, so a large model never needs a second full copy in memory.
struct TensorSpecOut {
  std::string name;
  std::vector<int64_t> shape;
};
void write_safetensors(const std::string& path, const std::vector<TensorSpecOut>& specs,
                       DType dtype, const std::function<Tensor(size_t)>& produce,
                       const std::map<std::string, std::string>& metadata = {});

// Integer tensors for reference files (stored as I32).
void write_safetensors_int32(
    const std::string& path,
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int32_t>>>& t);

}  // namespace hypic::model
