#pragma once
// Segment entries into the memory tier of a run that computes on a device: each array goes
// host → device once, through page-locked staging buffers on the backend's transfer stream,
// and the entry then stays resident (SegmentEntry::resident) until the memory tier evicts it.
// Queries that hit it splice from device memory: nothing of a hot entry crosses the bus again.
//
// Overlap: two staging buffers of at most kChunkBytes each. While the copy engine moves one
// chunk, the host fills the other (double buffering), and while an entry's last chunks are in
// flight the host returns to read and decode the next store entry, or the GPU runs the
// prompt prefix's prefill. The composition fences on the entries' last tickets before it
// splices (compose_segments).
#include <cstddef>
#include <cstdint>

#include "hypic/kernels/backend.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::pic {

class EntryUploader {
 public:
  static constexpr size_t kChunkBytes = size_t(8) << 20;

  explicit EntryUploader(const kernels::Backend& be) : be_(be) {}
  ~EntryUploader();  // fences the uploads in flight, frees the staging buffers
  EntryUploader(const EntryUploader&) = delete;
  EntryUploader& operator=(const EntryUploader&) = delete;

  // The resident copy of a host entry on the backend's device (the host arrays are released
  // with `entry`). Returns at once; the copies may still be in flight (upload_ticket).
  SegmentEntry upload(SegmentEntry&& entry);

  uint64_t entries() const { return entries_; }  // entries uploaded so far
  uint64_t bytes() const { return bytes_; }      // their bytes

 private:
  // dst (device) ← src (host) in chunks through the staging buffers; returns the last ticket.
  uint64_t stage(void* dst, const void* src, size_t bytes);

  struct Buffer {
    void* data = nullptr;
    uint64_t ticket = 0;  // the upload still reading it (0: none)
  };
  const kernels::Backend& be_;
  Buffer buffers_[2];
  int next_ = 0;
  uint64_t last_ticket_ = 0;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace hypic::pic
