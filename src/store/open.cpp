#include "store/open.hpp"

#include <filesystem>

namespace hypic::store {

SegmentStore open_for_writing(const std::string& path, const std::string& fingerprint,
                              int junction_code, DType dtype, bool sync_to_disk) {
  if (is_new_store_path(path)) {  // absent, or an empty file (made new)
    StoreOptions o;
    o.model_fingerprint = fingerprint;
    o.junction = junction_code;
    o.dtype = dtype;
    o.sync_to_disk = sync_to_disk;
    return SegmentStore::create(path, o);
  }
  return SegmentStore::open(path, fingerprint, junction_code, OpenMode::kWrite);
}

}  // namespace hypic::store
