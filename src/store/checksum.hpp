#pragma once
// Checksums and content hashes for the segment store.
//
// - CRC32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78, init and final xor
//   0xFFFFFFFF): the per-entry checksum. Uses the SSE4.2 crc32 instruction when the build
//   targets it, a table otherwise; both give the same value.
// - FNV-1a 128-bit (offset basis 0x6c62272e07bb014262b821756295c58d, prime 2^88 + 0x13b):
//   the entry key. Non-cryptographic: it guards against accidents (a stale store, another
//   model), not against an adversary who crafts collisions.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hypic::store {

// CRC32C of `size` bytes. Pass the previous result as `crc` to continue a running checksum:
// crc32c(b, nb, crc32c(a, na)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The same by a byte-wise table (the reference the fast path is tested against).
uint32_t crc32c_bytewise(const void* data, size_t size, uint32_t crc = 0);

struct Hash128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Hash128& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 31)); }
};

// 32 lowercase hex digits, most significant first.
std::string to_hex(const Hash128& h);
// Parses 32 hex digits (either case); false when `text` is not exactly that.
bool parse_hex128(const std::string& text, Hash128& out);

class Fnv1a128 {
 public:
  Fnv1a128& update(const void* data, size_t size);
  template <typename T>
  Fnv1a128& update_value(T value) {  // little-endian bytes of an integer
    unsigned char bytes[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i)
      bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(value) >> (8 * i));
    return update(bytes, sizeof(T));
  }
  Hash128 digest() const { return state_; }

 private:
  Hash128 state_{0x6c62272e07bb0142ULL, 0x62b821756295c58dULL};
};

}  // namespace hypic::store
