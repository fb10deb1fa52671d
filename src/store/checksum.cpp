#include "store/checksum.hpp"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace hypic::store {
namespace {

constexpr uint32_t kCrc32cReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCrc32cReflected : 0u);
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t state = ~crc;
  uint64_t wide = state;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
    p += 8;
    size -= 8;
  }
  state = static_cast<uint32_t>(wide);
  while (size > 0) {
    state = _mm_crc32_u8(state, *p++);
    --size;
  }
  return ~state;
#else
  return crc32c_bytewise(data, size, crc);
#endif
}

uint32_t crc32c_bytewise(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t state = ~crc;
  for (size_t i = 0; i < size; ++i) state = (state >> 8) ^ kCrcTable[(state ^ p[i]) & 0xFFu];
  return ~state;
}

std::string to_hex(const Hash128& h) {
  static const char* digits = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = digits[(h.hi >> (4 * i)) & 0xF];
    out[31 - i] = digits[(h.lo >> (4 * i)) & 0xF];
  }
  return out;
}

bool parse_hex128(const std::string& text, Hash128& out) {
  if (text.size() != 32) return false;
  Hash128 value;
  for (size_t i = 0; i < 32; ++i) {
    char c = text[i];
    uint64_t nibble;
    if (c >= '0' && c <= '9') {
      nibble = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      nibble = static_cast<uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      nibble = static_cast<uint64_t>(c - 'A' + 10);
    } else {
      return false;
    }
    uint64_t& half = i < 16 ? value.hi : value.lo;
    half = (half << 4) | nibble;
  }
  out = value;
  return true;
}

Fnv1a128& Fnv1a128::update(const void* data, size_t size) {
  // Multiplying by the prime 2^88 + 0x13b modulo 2^128: x * 0x13b plus x shifted left by 88.
  __extension__ typedef unsigned __int128 u128;
  u128 x = (static_cast<u128>(state_.hi) << 64) | state_.lo;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    x ^= p[i];
    x = x * 0x13bu + (x << 88);
  }
  state_.hi = static_cast<uint64_t>(x >> 64);
  state_.lo = static_cast<uint64_t>(x);
  return *this;
}

}  // namespace hypic::store
