#include "store/entry.hpp"

#include <algorithm>
#include <cstring>

#include "hypic/error.hpp"
#include "store/checksum.hpp"
#include "store/entry_record.hpp"

namespace hypic::store {
namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Shifts `value` right by `shift` (1..31) bits, rounding to nearest, ties to even.
uint32_t shift_round_even(uint32_t value, int shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  return kept;
}

}  // namespace

size_t Entry::element_count() const {
  size_t n = 0;
  for (const auto& [name, tensor] : arrays) n += static_cast<size_t>(tensor.numel());
  return n;
}

int64_t ArrayView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t EntryView::element_count() const {
  size_t n = 0;
  for (const auto& [name, a] : arrays) n += static_cast<size_t>(a.numel());
  return n;
}

EntryView view_of(const Entry& entry) {
  EntryView v;
  v.n_tokens = entry.n_tokens;
  for (const auto& [name, tensor] : entry.arrays)
    v.arrays.emplace(name, ArrayView{tensor.shape(), tensor.data()});
  return v;
}

const Tensor& Entry::at(const std::string& name) const {
  auto found = arrays.find(name);
  if (found != arrays.end()) return found->second;
  std::string names;
  for (const auto& [have, tensor] : arrays) names += (names.empty() ? "" : ", ") + have;
  throw Error("segment entry has no array '" + name +
              "' (it has: " + (names.empty() ? std::string("none") : names) + ")");
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return DType::F32;
  if (text == "bf16" || text == "bfloat16") return DType::BF16;
  if (text == "f16" || text == "float16") return DType::F16;
  throw Error("unknown store dtype '" + text + "': choose f32, bf16 or f16");
}

uint16_t f32_to_bf16(float value) {
  uint32_t x = float_bits(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even; a carry into the
  // exponent is the correct result (including overflow to infinity).
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_f32(uint16_t bits) {
  return bits_float(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_f16(float value) {
  uint32_t x = float_bits(value);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // infinity or NaN
    if (magnitude == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520
  if (magnitude >= 0x38800000u) {  // normal in f16: rebias the exponent, round 13 bits away
    uint32_t rebased = magnitude - (112u << 23);
    return static_cast<uint16_t>(sign | shift_round_even(rebased, 13));
  }
  // Subnormal in f16 (or zero): count units of 2^-24.
  int exponent = static_cast<int>(magnitude >> 23);
  if (exponent < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  return static_cast<uint16_t>(sign | shift_round_even(mantissa, 126 - exponent));
}

float f16_to_f32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return bits_float(float_bits(magnitude) | sign);
  }
  if (exponent == 31) return bits_float(sign | 0x7F800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

namespace {
void check_store_dtype(DType dtype) {
  HYPIC_REQUIRE(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
                std::string("the segment store keeps f32, bf16 or f16, not ") + dtype_name(dtype));
}
}  // namespace

void encode(DType dtype, const float* src, size_t n, void* dst) {
  check_store_dtype(dtype);
  if (n == 0) return;  // src and dst may then be null, which memcpy must never see
  if (dtype == DType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == DType::BF16) {
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(src[i]);
  }
}

void decode(DType dtype, const void* src, size_t n, float* dst) {
  check_store_dtype(dtype);
  if (n == 0) return;  // an empty array: src and dst may be null
  if (dtype == DType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  if (dtype == DType::BF16) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(in[i]);
  }
}

void round_in_place(DType dtype, float* x, size_t n) {
  if (dtype == DType::BF16) {
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  } else if (dtype == DType::F16) {
    for (size_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  }
}

std::string decode_entry(int64_t n_tokens, const std::vector<ArrayRecord>& dir,
                         const std::vector<std::string>& names, DType dtype,
                         const unsigned char* payload, uint64_t payload_offset,
                         uint64_t payload_count, Entry& out) {
  check_store_dtype(dtype);
  out = Entry{};
  out.n_tokens = n_tokens;
  for (const ArrayRecord& a : dir) {
    if (a.name_id >= names.size() || a.rank > kMaxStoredRank)
      return "its array directory is inconsistent";
    const std::string& name = names[a.name_id];
    std::vector<int64_t> shape(a.shape, a.shape + a.rank);
    // Checked: a product that wraps could pass the bounds test below with a small count
    // while the tensor's shape claims far more elements than were read.
    uint64_t count = 1;
    for (int64_t d : shape)
      if (d < 0) return "its array directory holds a negative dimension";
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
      count = 0;  // an empty array (e.g. no cached positions yet), whatever its other sizes
    } else {
      for (int64_t d : shape) {
        const auto u = static_cast<uint64_t>(d);
        if (count > payload_count / u)
          return "array '" + name + "' lies outside the entry's payload";
        count *= u;
      }
    }
    if (a.offset < payload_offset || a.offset - payload_offset > payload_count ||
        count > payload_count - (a.offset - payload_offset))
      return "array '" + name + "' lies outside the entry's payload";
    if (out.arrays.count(name) != 0) return "its array directory names '" + name + "' twice";
    Tensor t(shape);
    decode(dtype, payload + (a.offset - payload_offset) * dtype_size(dtype), count, t.data());
    out.arrays.emplace(name, std::move(t));
  }
  return "";
}

std::string entry_key(const std::string& model_fingerprint, const std::vector<int32_t>& tokens,
                      int junction) {
  static const char kDomain[] = "hypic.segment.v1";
  Fnv1a128 hash;
  hash.update(kDomain, sizeof(kDomain) - 1);
  hash.update_value<uint64_t>(model_fingerprint.size());
  hash.update(model_fingerprint.data(), model_fingerprint.size());
  hash.update_value<int64_t>(junction);
  hash.update_value<uint64_t>(tokens.size());
  for (int32_t token : tokens) hash.update_value<uint32_t>(static_cast<uint32_t>(token));
  return to_hex(hash.digest());
}

std::string array_kind(const std::string& name) {
  size_t first = name.find('/');
  if (first == std::string::npos) return name;
  size_t last = name.rfind('/');
  return name.substr(0, first) + "/" + name.substr(last + 1);
}

}  // namespace hypic::store
