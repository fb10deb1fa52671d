#include "pic/entry_upload.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/copy_stats.hpp"

namespace hypic::pic {

EntryUploader::~EntryUploader() {
  for (Buffer& b : buffers_) {
    if (b.data == nullptr) continue;
    try {
      be_.upload_fence(b.ticket);
    } catch (...) {  // a failed device: the buffer is freed below all the same
    }
    be_.free_staging(b.data);
  }
}

uint64_t EntryUploader::stage(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kChunkBytes, bytes - done);
    Buffer& b = buffers_[next_];
    next_ ^= 1;
    if (b.data == nullptr) b.data = be_.allocate_staging(kChunkBytes);
    be_.upload_fence(b.ticket);  // the chunk before last is off this buffer
    std::memcpy(b.data, s + done, n);
    b.ticket = last_ticket_ = be_.upload_async(d + done, b.data, n);
    done += n;
  }
  stats::count_entry_copy(bytes);  // host array → staging
  bytes_ += bytes;
  return last_ticket_;
}

SegmentEntry EntryUploader::upload(SegmentEntry&& entry) {
  HYPIC_REQUIRE(!entry.resident(), "segment entry is already resident on a device");
  const Device dev = be_.device();
  HYPIC_REQUIRE(dev != Device::Host, "entries are resident on a device backend only");
  // An absent array (Ring's conv, MLA's V: a default tensor, no shape) stays absent: a device
  // tensor of shape {} would hold one element, read from no host memory.
  auto up_tensor = [&](const Tensor& host) {
    if (host.rank() == 0) return Tensor();
    Tensor t(host.shape(), DType::F32, dev, &be_);
    if (!t.empty()) stage(t.raw(), host.data(), t.bytes());
    return t;
  };
  auto up = [&](const float* src, const std::vector<int64_t>& shape) {
    Tensor t(shape, DType::F32, dev, &be_);
    if (!t.empty()) stage(t.raw(), src, t.bytes());
    return t;
  };
  auto up_vec = [&](std::vector<float>& v) {
    Tensor t;
    if (!v.empty()) t = up(v.data(), {static_cast<int64_t>(v.size())});
    std::vector<float>().swap(v);  // the summary keeps its dimensions only
    return t;
  };
  SegmentEntry out = std::move(entry);
  for (LinearLayerEntry& l : out.linear) {
    l.device.t = up_vec(l.summary.t);
    l.device.x = up_vec(l.summary.x);
    l.device.y = up_vec(l.summary.y);
    l.device.s = up_vec(l.summary.s);
    l.conv = up_tensor(l.conv);
  }
  for (AttentionLayerEntry& a : out.attention) {
    a.k = up_tensor(a.k);
    a.v = up_tensor(a.v);
  }
  out.where = dev;
  out.upload_ticket = last_ticket_;
  ++entries_;
  return out;
}

}  // namespace hypic::pic
