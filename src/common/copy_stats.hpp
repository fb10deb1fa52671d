#pragma once
// A debug statistic: bytes copied or converted in memory while a cold segment entry travels
// from a worker's message (or compute_entry, in one process) to the memory tier and the store
// (decoding the message, rounding to the store's dtype, building the store's arrays, encoding
// them for the file). The engine reports the share of its cold entries as
// QueryResult::cold_bytes_copied; docs/engine.md gives the numbers before and after the copies
// on that path were cut. Process-wide, relaxed: the count is exact once the work is done.
#include <atomic>
#include <cstdint>

namespace hypic::stats {

inline std::atomic<uint64_t>& entry_copy_counter() {
  static std::atomic<uint64_t> bytes{0};
  return bytes;
}
inline void count_entry_copy(uint64_t bytes) {
  entry_copy_counter().fetch_add(bytes, std::memory_order_relaxed);
}
inline uint64_t entry_bytes_copied() {
  return entry_copy_counter().load(std::memory_order_relaxed);
}

}  // namespace hypic::stats
