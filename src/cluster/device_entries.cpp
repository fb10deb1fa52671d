#include "cluster/device_entries.hpp"

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

namespace hypic::cluster {

DeviceEntrySender::~DeviceEntrySender() {
  // Freeing an array a transfer still reads would corrupt what rank 0 receives; while an
  // exception unwinds (the job is ending) there is nothing left to protect.
  const auto deadline =
      std::chrono::steady_clock::now() +
      (std::uncaught_exceptions() > 0 ? std::chrono::seconds(0) : std::chrono::seconds(5));
  try {
    while (test() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } catch (...) {  // a failed device: nothing more to wait for
  }
}

void DeviceEntrySender::send(int64_t segment, const std::string& key, store::Entry&& entry) {
  std::vector<kernels::DeviceLink::Part> parts;
  for (auto& [name, tensor] : entry.arrays)
    if (tensor.device() != Device::Host) parts.push_back({tensor.raw(), tensor.bytes()});
  // The transfer first: when rank 0 reads the header, the matching send is already queued.
  const uint64_t ticket = link_.send(parts, destination_);
  std::vector<SendQueue::Part> header;
  header.push_back({serialize_device_header(segment, key, entry), kTagDeviceEntry});
  in_flight_.emplace_back(ticket, std::move(entry));
  queue_.post(destination_, std::move(header));
  queue_.test();
}

size_t DeviceEntrySender::test() {
  queue_.test();
  for (auto it = in_flight_.begin(); it != in_flight_.end();)
    it = link_.done(it->first) ? in_flight_.erase(it) : std::next(it);
  return in_flight_.size() + queue_.pending();
}

void DeviceEntrySender::wait_all() {
  queue_.wait_all();
  while (test() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

store::Entry receive_device_arrays(const kernels::Backend& be, kernels::DeviceLink& link,
                                   DeviceEntryHeader&& header, int source) {
  HYPIC_REQUIRE(be.device() != Device::Host,
                "rank " + std::to_string(source) +
                    " sent an entry to this rank's device, but this rank computes on the host");
  store::Entry entry = std::move(header.host);
  std::vector<kernels::DeviceLink::Part> parts;
  for (const ArrayShape& a : header.device.arrays) {
    Tensor t(a.shape, DType::F32, be.device(), &be);
    parts.push_back({t.raw(), t.bytes()});
    HYPIC_REQUIRE(
        entry.arrays.emplace(a.name, std::move(t)).second,
        "device entry from rank " + std::to_string(source) + " names array " + a.name + " twice");
  }
  link.compute_after(link.recv(parts, source));
  return entry;
}

}  // namespace hypic::cluster
