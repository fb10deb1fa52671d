#pragma once
// Opening a store to write into, as the commands do: created with `dtype` when absent; an
// existing store keeps its own dtype, and its fingerprint and junction must match (else
// hypic::Error naming both).
#include <string>

#include "store/segment_store.hpp"

namespace hypic::store {

// Whether opening `path` for writing makes a new store: true when nothing is there or the file
// is empty (0 bytes: no store yet, e.g. made by `touch` or mktemp(1)); false for a non-empty
// regular file; anything else (a folder, FIFO, device) is refused with hypic::Error.
bool is_new_store_path(const std::string& path);

// Opens `path` for writing; absent or empty (is_new_store_path): created.
SegmentStore open_for_writing(const std::string& path, const std::string& fingerprint,
                              int junction_code, DType dtype, bool sync_to_disk = false);

}  // namespace hypic::store
