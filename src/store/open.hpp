#pragma once
// Opening a store to write into, as the commands do: created with `dtype` when absent; an
// existing store keeps its own dtype, and its fingerprint and junction must match (else
// hypic::Error naming both).
#include <string>

#include "store/segment_store.hpp"

namespace hypic::store {

SegmentStore open_for_writing(const std::string& path, const std::string& fingerprint,
                              int junction_code, DType dtype, bool sync_to_disk = false);

}  // namespace hypic::store
