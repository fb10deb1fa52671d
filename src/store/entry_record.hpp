#pragma once
// An entry as a store file holds it: the rows of its array directory and the decoder that
// turns them and the payload back into an Entry. segment_store.cpp reads the rows from HDF5;
// the fuzz target tests/fuzz/fuzz_store_entry.cpp feeds it bytes. Kept apart from entry.hpp,
// which most of the tree includes.
#include <cstdint>
#include <string>
#include <vector>

#include "store/entry.hpp"

namespace hypic::store {

constexpr int kMaxStoredRank = 6;

// One row of a store's array directory (/arrays).
struct ArrayRecord {
  uint32_t name_id;               // row in /array_names
  uint32_t rank;                  // at most kMaxStoredRank
  int64_t shape[kMaxStoredRank];  // unused dimensions are 0
  uint64_t offset;                // first element in /payload
};

// Rebuilds an entry from its array directory and its payload: `payload` holds `payload_count`
// elements of `dtype`, element 0 being element `payload_offset` of the store's payload.
// Returns "" and fills `out`, or what is inconsistent (then `out` is unspecified). Never
// throws for damage, never reads outside `payload` and never allocates more elements than it
// holds, whatever the rows say (their checksum may have been forged).
std::string decode_entry(int64_t n_tokens, const std::vector<ArrayRecord>& dir,
                         const std::vector<std::string>& names, DType dtype,
                         const unsigned char* payload, uint64_t payload_offset,
                         uint64_t payload_count, Entry& out);

}  // namespace hypic::store
