// safetensors reading (validated header, on-demand tensor reads, shards) and writing.
#include "model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/files.hpp"
#include "hypic/error.hpp"

#if !defined(_WIN32)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace hypic::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The header of a safetensors file is bounded by the format (100 MB); anything larger is
// corruption, not a header.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

bool host_is_little_endian() {
  const uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The format's spelling of each element type (byte-identical to what files hold).
struct DTypeEntry {
  DType dtype;
  const char* name;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::F32, "F32"}, {DType::F16, "F16"},   {DType::BF16, "BF16"}, {DType::I32, "I32"},
    {DType::I64, "I64"}, {DType::F64, "F64"},   {DType::I8, "I8"},     {DType::U8, "U8"},
    {DType::I16, "I16"}, {DType::BOOL, "BOOL"},
};

std::string json_text_error(const std::string& path, const std::string& what) {
  return path + ": invalid safetensors header: " + what;
}

}  // namespace

const char* safetensors_dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  throw Error("internal: unknown dtype");
}

DType parse_dtype(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "f32" || l == "float32" || l == "float") return DType::F32;
  if (l == "bf16" || l == "bfloat16") return DType::BF16;
  if (l == "f16" || l == "float16" || l == "half") return DType::F16;
  throw Error("unsupported dtype '" + s + "' (supported: f32, bf16, f16)");
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep it a (quiet) NaN
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // signed zero
    } else {        // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exp = (bits >> 23) & 0xffu;
  uint32_t mant = bits & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign;  // underflow -> signed zero
    mant |= 0x800000u;         // implicit bit
    const int shift = 14 - e;  // 24-bit mantissa down to the subnormal's 10 bits
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(sign | half);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string TensorInfo::shape_str() const {
  return shape_to_string(shape);
}

// ---------------------------------------------------------------------------------------
// Reading

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  HYPIC_REQUIRE(host_is_little_endian(), "safetensors: big-endian hosts are not supported");
  std::error_code ec;
  const uint64_t file_size = fs::file_size(path_, ec);
  HYPIC_REQUIRE(!ec, path_ + ": cannot open (" + ec.message() + ")");
  HYPIC_REQUIRE(file_size >= 8, path_ + ": file is " + std::to_string(file_size) +
                                    " bytes, too short for a safetensors header (truncated?)");
  file_ = std::fopen(path_.c_str(), "rb");
  HYPIC_REQUIRE(file_ != nullptr, path_ + ": cannot open for reading");
  // A constructor that throws runs no destructor: close the file here when a check below
  // refuses it, or every refused file would keep a descriptor open.
  struct CloseIfThrowing {
    std::FILE*& file;
    const int exceptions = std::uncaught_exceptions();
    ~CloseIfThrowing() {
      if (std::uncaught_exceptions() > exceptions) {
        std::fclose(file);
        file = nullptr;
      }
    }
  } close_if_throwing{file_};

  unsigned char len_bytes[8];
  HYPIC_REQUIRE(std::fread(len_bytes, 1, 8, file_) == 8, path_ + ": cannot read the header length");
  const uint64_t header_len = load_le64(len_bytes);
  HYPIC_REQUIRE(header_len <= kMaxHeaderBytes,
                json_text_error(path_, "header length " + std::to_string(header_len) +
                                           " is implausible (not a safetensors file?)"));
  HYPIC_REQUIRE(8 + header_len <= file_size,
                path_ + ": header claims " + std::to_string(header_len) +
                    " bytes but the file has " + std::to_string(file_size) +
                    " bytes in all (truncated?)");
  std::string header(header_len, '\0');
  HYPIC_REQUIRE(std::fread(header.data(), 1, header_len, file_) == header_len,
                path_ + ": cannot read the header");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  json h;
  try {
    h = json::parse(header);
  } catch (const std::exception& e) {
    throw Error(json_text_error(path_, e.what()));
  }
  HYPIC_REQUIRE(h.is_object(), json_text_error(path_, "not a JSON object"));

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const json& t = it.value();
    const std::string where = "tensor '" + name + "'";
    HYPIC_REQUIRE(
        t.is_object() && t.contains("dtype") && t.contains("shape") && t.contains("data_offsets"),
        json_text_error(path_, where + " lacks dtype, shape or data_offsets"));
    TensorInfo info;
    info.name = name;
    const std::string dt = t.at("dtype").is_string() ? t.at("dtype").get<std::string>() : "";
    bool known = false;
    for (const auto& e : kDTypes)
      if (dt == e.name) {
        info.dtype = e.dtype;
        known = true;
      }
    HYPIC_REQUIRE(known, path_ + ": " + where + " has unsupported dtype '" + dt + "'");
    HYPIC_REQUIRE(t.at("shape").is_array(),
                  json_text_error(path_, where + ": shape is not a list"));
    uint64_t numel = 1;
    for (const json& d : t.at("shape")) {
      HYPIC_REQUIRE(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                    json_text_error(path_, where + ": shape has a non-integer or negative entry"));
      const uint64_t v = d.get<uint64_t>();
      HYPIC_REQUIRE(v == 0 || numel <= std::numeric_limits<uint64_t>::max() / v,
                    json_text_error(path_, where + ": shape overflows"));
      numel *= v;
      info.shape.push_back(static_cast<int64_t>(v));
    }
    const json& off = t.at("data_offsets");
    HYPIC_REQUIRE(
        off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
            off[1].is_number_unsigned(),
        json_text_error(path_, where + ": data_offsets must be two non-negative integers"));
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    HYPIC_REQUIRE(info.begin <= info.end,
                  json_text_error(path_, where + ": data_offsets end before they begin"));
    // Checked too: a byte count that wraps could match a short span, and the read would
    // then allocate the shape's full size.
    HYPIC_REQUIRE(numel <= std::numeric_limits<uint64_t>::max() / dtype_size(info.dtype),
                  json_text_error(path_, where + ": shape overflows"));
    const uint64_t expected = numel * dtype_size(info.dtype);
    HYPIC_REQUIRE(info.end - info.begin == expected,
                  path_ + ": " + where + " of shape " + info.shape_str() + " and dtype " + dt +
                      " needs " + std::to_string(expected) + " bytes but its data_offsets span " +
                      std::to_string(info.end - info.begin));
    HYPIC_REQUIRE(info.end <= data_size,
                  path_ + ": " + where + " ends at data byte " + std::to_string(info.end) +
                      " but the file holds only " + std::to_string(data_size) +
                      " bytes of tensor data (truncated file?)");
    tensors_.emplace(name, std::move(info));
  }
  // Each byte of tensor data belongs to one tensor at most: a header whose ranges overlap
  // would make two weights share (and silently misread) each other's bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, info] : tensors_)
    if (info.end > info.begin) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  const TensorInfo* reaches_furthest = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (reaches_furthest != nullptr && t->begin < reaches_furthest->end) {
      throw Error(path_ + ": tensors '" + reaches_furthest->name + "' (data bytes " +
                  std::to_string(reaches_furthest->begin) + ".." +
                  std::to_string(reaches_furthest->end) + ") and '" + t->name + "' (" +
                  std::to_string(t->begin) + ".." + std::to_string(t->end) +
                  ") overlap in their data_offsets; the file is damaged or was not written "
                  "by a safetensors writer");
    }
    // The format forbids holes too: bytes no tensor claims mean a damaged or foreign header.
    const uint64_t covered = reaches_furthest == nullptr ? 0 : reaches_furthest->end;
    HYPIC_REQUIRE(t->begin <= covered,
                  path_ + ": data bytes " + std::to_string(covered) + ".." +
                      std::to_string(t->begin) + " (before tensor '" + t->name +
                      "') belong to no tensor; the format allows no holes, so the header is "
                      "damaged or was not written by a safetensors writer");
    if (reaches_furthest == nullptr || t->end > reaches_furthest->end) reaches_furthest = t;
  }
  const uint64_t covered = reaches_furthest == nullptr ? 0 : reaches_furthest->end;
  HYPIC_REQUIRE(covered == data_size,
                path_ + ": the last " + std::to_string(data_size - covered) +
                    " bytes of tensor data (from data byte " + std::to_string(covered) +
                    ") belong to no tensor; the format allows no holes, so the header is "
                    "damaged or the file was not written by a safetensors writer");

#if !defined(_WIN32)
  // Map the file once: tensors are then read in place, converted and released one by one.
  if (file_size > 0) {
    void* m = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fileno(file_), 0);
    if (m != MAP_FAILED) {
      map_ = static_cast<const unsigned char*>(m);
      map_size_ = file_size;
    }  // else: read_bytes falls back to reading through the file handle
  }
#endif
}

SafetensorsFile::~SafetensorsFile() {
#if !defined(_WIN32)
  if (map_ != nullptr) munmap(const_cast<unsigned char*>(map_), map_size_);
#endif
  if (file_) std::fclose(file_);
}

const unsigned char* SafetensorsFile::bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  HYPIC_REQUIRE(map_ != nullptr || t.end == t.begin,
                path_ + ": the file could not be memory-mapped");
  return map_ == nullptr ? nullptr : map_ + data_start_ + t.begin;
}

void SafetensorsFile::release(const std::string& name) const {
#if !defined(_WIN32)
  const TensorInfo& t = info(name);
  if (map_ == nullptr || t.end == t.begin) return;
  // Only whole pages inside the tensor: a neighbour's bytes stay mapped.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = (data_start_ + t.begin + page - 1) / page * page;
  const uint64_t end = (data_start_ + t.end) / page * page;
  if (end > begin) madvise(const_cast<unsigned char*>(map_) + begin, end - begin, MADV_DONTNEED);
#else
  (void)name;
#endif
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  HYPIC_REQUIRE(it != tensors_.end(), path_ + ": no tensor named '" + name + "'");
  return it->second;
}

std::vector<unsigned char> SafetensorsFile::read_bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::vector<unsigned char> buf(t.end - t.begin);
  if (buf.empty()) return buf;
  if (map_ != nullptr) {
    std::memcpy(buf.data(), map_ + data_start_ + t.begin, buf.size());
    return buf;
  }
  const uint64_t pos = data_start_ + t.begin;
  bool ok = false;
#if defined(_WIN32)
  ok = _fseeki64(file_, static_cast<long long>(pos), SEEK_SET) == 0;
#else
  ok = fseeko(file_, static_cast<off_t>(pos), SEEK_SET) == 0;
#endif
  ok = ok && std::fread(buf.data(), 1, buf.size(), file_) == buf.size();
  HYPIC_REQUIRE(ok, path_ + ": cannot read tensor '" + name + "' (file changed or truncated?)");
  return buf;
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const TensorInfo& t = info(name);
  HYPIC_REQUIRE(dtype_is_float(t.dtype), path_ + ": tensor '" + name + "' has dtype " +
                                             safetensors_dtype_name(t.dtype) +
                                             ", expected BF16, F16 or F32");
  std::vector<unsigned char> copied;
  const unsigned char* raw = map_ != nullptr ? map_ + data_start_ + t.begin : nullptr;
  if (raw == nullptr) {
    copied = read_bytes(name);
    raw = copied.data();
  }
  Tensor out(t.shape);
  float* dst = out.data();
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0) return out;
  if (t.dtype == DType::F32) {
    std::memcpy(dst, raw, n * 4);
  } else {
    const bool bf = t.dtype == DType::BF16;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
      dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return out;
}

std::vector<int32_t> SafetensorsFile::read_int32(const std::string& name) const {
  const TensorInfo& t = info(name);
  HYPIC_REQUIRE(t.dtype == DType::I32 || t.dtype == DType::I64,
                path_ + ": tensor '" + name + "' has dtype " + safetensors_dtype_name(t.dtype) +
                    ", expected I32 or I64");
  const std::vector<unsigned char> raw = read_bytes(name);
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<int32_t> out(n);
  if (t.dtype == DType::I32) {
    std::memcpy(out.data(), raw.data(), n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      HYPIC_REQUIRE(
          v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(),
          path_ + ": tensor '" + name + "' holds " + std::to_string(v) +
              ", outside the int32 range");
      out[i] = static_cast<int32_t>(v);
    }
  }
  return out;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& kv : files_[0]->tensors()) where_[kv.first] = 0;
    return;
  }
  HYPIC_REQUIRE(fs::exists(index), dir + ": no model.safetensors or model.safetensors.index.json");
  index_path_ = index.string();
  json j;
  {
    const std::string text = read_regular_file(index_path_, "checkpoint index");
    try {
      j = json::parse(text);
    } catch (const std::exception& e) {
      throw Error(index_path_ + ": invalid JSON: " + e.what());
    }
  }
  HYPIC_REQUIRE(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
                index_path_ + ": missing 'weight_map' object");
  std::map<std::string, size_t> file_index;
  for (auto it = j.at("weight_map").begin(); it != j.at("weight_map").end(); ++it) {
    HYPIC_REQUIRE(it->is_string(),
                  index_path_ + ": weight_map entry '" + it.key() + "' is not a file");
    const std::string shard = it->get<std::string>();
    HYPIC_REQUIRE(shard.find("..") == std::string::npos && !fs::path(shard).is_absolute(),
                  index_path_ + ": weight_map names file '" + shard + "' outside the folder");
    auto f = file_index.find(shard);
    if (f == file_index.end()) {
      const fs::path p = fs::path(dir) / shard;
      HYPIC_REQUIRE(fs::exists(p), index_path_ + ": shard '" + shard + "' (holding tensor '" +
                                       it.key() + "') does not exist");
      files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
      f = file_index.emplace(shard, files_.size() - 1).first;
    }
    HYPIC_REQUIRE(files_[f->second]->contains(it.key()), index_path_ + ": tensor '" + it.key() +
                                                             "' is listed in shard '" + shard +
                                                             "' but that file does not hold it");
    where_[it.key()] = f->second;
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  HYPIC_REQUIRE(it != where_.end(), "checkpoint has no tensor named '" + name + "'");
  return files_[it->second]->info(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  HYPIC_REQUIRE(it != where_.end(), "checkpoint has no tensor named '" + name + "'");
  return files_[it->second]->path();
}

Tensor SafetensorsCheckpoint::read(const std::string& name) const {
  auto it = where_.find(name);
  HYPIC_REQUIRE(it != where_.end(), "checkpoint has no tensor named '" + name + "'");
  return files_[it->second]->read(name);
}

const unsigned char* SafetensorsCheckpoint::bytes(const std::string& name) const {
  auto it = where_.find(name);
  HYPIC_REQUIRE(it != where_.end(), "checkpoint has no tensor named '" + name + "'");
  return files_[it->second]->bytes(name);
}

void SafetensorsCheckpoint::release(const std::string& name) const {
  auto it = where_.find(name);
  if (it != where_.end()) files_[it->second]->release(name);
}

std::vector<int32_t> SafetensorsCheckpoint::read_int32(const std::string& name) const {
  auto it = where_.find(name);
  HYPIC_REQUIRE(it != where_.end(), "checkpoint has no tensor named '" + name + "'");
  return files_[it->second]->read_int32(name);
}

// ---------------------------------------------------------------------------------------
// Writing

namespace {

struct OutEntry {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  std::function<std::vector<unsigned char>()> bytes;
};

std::vector<unsigned char> encode(const Tensor& t, DType dtype) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<unsigned char> out(n * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(out.data(), t.data(), n * 4);
    return out;
  }
  HYPIC_REQUIRE(
      dtype == DType::BF16 || dtype == DType::F16,
      std::string("safetensors writer: cannot store floats as ") + safetensors_dtype_name(dtype));
  const bool bf = dtype == DType::BF16;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h =
        bf ? f32_to_bf16(t[static_cast<int64_t>(i)]) : f32_to_f16(t[static_cast<int64_t>(i)]);
    out[2 * i] = static_cast<unsigned char>(h & 0xff);
    out[2 * i + 1] = static_cast<unsigned char>(h >> 8);
  }
  return out;
}

void write_entries(const std::string& path, std::vector<OutEntry> entries,
                   const std::map<std::string, std::string>& metadata) {
  HYPIC_REQUIRE(host_is_little_endian(), "safetensors: big-endian hosts are not supported");
  std::sort(entries.begin(), entries.end(),
            [](const OutEntry& a, const OutEntry& b) { return a.name < b.name; });
  json h = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  for (const auto& kv : metadata) meta[kv.first] = kv.second;
  h["__metadata__"] = meta;
  uint64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const OutEntry& e = entries[i];
    HYPIC_REQUIRE(i == 0 || entries[i - 1].name != e.name,
                  "safetensors writer: tensor '" + e.name + "' given twice");
    const uint64_t bytes = Tensor::count(e.shape) * dtype_size(e.dtype);
    h[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                 {"shape", e.shape},
                 {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header.push_back(' ');  // align the data area to 8 bytes

  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  HYPIC_REQUIRE(f != nullptr, path + ": cannot open for writing");
  bool ok = true;
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  ok = ok && std::fwrite(len, 1, 8, f) == 8;
  ok = ok && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  try {
    for (const OutEntry& e : entries) {
      if (!ok) break;
      const std::vector<unsigned char> b = e.bytes();
      HYPIC_REQUIRE(
          b.size() == Tensor::count(e.shape) * dtype_size(e.dtype),
          "safetensors writer: tensor '" + e.name + "' produced the wrong number of bytes");
      ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
    }
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error(path + ": write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  HYPIC_REQUIRE(!ec, path + ": cannot rename the written file into place (" + ec.message() + ")");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata) {
  std::vector<OutEntry> entries;
  for (const NamedTensor& t : tensors) {
    const Tensor* p = t.tensor;
    entries.push_back({t.name, p->shape(), dtype, [p, dtype] { return encode(*p, dtype); }});
  }
  write_entries(path, std::move(entries), metadata);
}

void write_safetensors(const std::string& path, const std::vector<TensorSpecOut>& specs,
                       DType dtype, const std::function<Tensor(size_t)>& produce,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<OutEntry> entries;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string name = specs[i].name;
    const std::vector<int64_t> shape = specs[i].shape;
    entries.push_back({name, shape, dtype, [i, &produce, name, shape, dtype] {
                         const Tensor t = produce(i);
                         HYPIC_REQUIRE(t.shape() == shape,
                                       "safetensors writer: tensor '" + name + "' has shape " +
                                           t.shape_str() + ", declared " + shape_to_string(shape));
                         return encode(t, dtype);
                       }});
  }
  write_entries(path, std::move(entries), metadata);
}

void write_safetensors_int32(
    const std::string& path,
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int32_t>>>& t) {
  std::vector<OutEntry> entries;
  for (const auto& kv : t) {
    const auto* v = &kv.second;
    HYPIC_REQUIRE(Tensor::count(v->first) == v->second.size(),
                  "safetensors writer: tensor '" + kv.first + "' has the wrong number of values");
    entries.push_back({kv.first, v->first, DType::I32, [v] {
                         std::vector<unsigned char> b(v->second.size() * 4);
                         std::memcpy(b.data(), v->second.data(), b.size());
                         return b;
                       }});
  }
  write_entries(path, std::move(entries), {});
}

}  // namespace hypic::model
