#pragma once
// A stand-in for the NCCL link under mpirun on any machine: the stand-in device
// (fake_device.hpp) keeps its memory on the host, so a transfer's parts can go as MPI messages
// on a communicator of their own. Same contract as NCCL's (device_link.hpp): one send pairs
// with one receive of the peer, in the order both were queued (MPI does not overtake messages
// of one tag between two ranks); a receive's data is there for the compute queued afterwards
// (compute_after waits for it: the stand-in computes on the host, at once).
#include <mpi.h>

#include <cstdint>
#include <map>
#include <vector>

#include "hypic/kernels/device_link.hpp"

namespace pic_test {

class MpiDeviceLink final : public hypic::kernels::DeviceLink {
 public:
  explicit MpiDeviceLink(MPI_Comm comm) { MPI_Comm_dup(comm, &comm_); }
  ~MpiDeviceLink() override {
    for (auto& [ticket, requests] : pending_)
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    MPI_Comm_free(&comm_);
  }
  MpiDeviceLink(const MpiDeviceLink&) = delete;
  MpiDeviceLink& operator=(const MpiDeviceLink&) = delete;

  const char* name() const override { return "mpi-stand-in"; }
  uint64_t send(const std::vector<Part>& parts, int peer) override {
    std::vector<MPI_Request>& r = pending_[++tickets_];
    for (const Part& p : parts) {
      r.emplace_back();
      MPI_Isend(p.data, static_cast<int>(p.bytes), MPI_BYTE, peer, 1, comm_, &r.back());
      bytes_sent += p.bytes;
    }
    return tickets_;
  }
  uint64_t recv(const std::vector<Part>& parts, int peer) override {
    std::vector<MPI_Request>& r = pending_[++tickets_];
    for (const Part& p : parts) {
      r.emplace_back();
      MPI_Irecv(p.data, static_cast<int>(p.bytes), MPI_BYTE, peer, 1, comm_, &r.back());
      bytes_received += p.bytes;
    }
    ++receives;
    return tickets_;
  }
  bool done(uint64_t ticket) override {
    const auto it = pending_.find(ticket);
    if (it == pending_.end()) return true;
    int flag = 0;
    MPI_Testall(static_cast<int>(it->second.size()), it->second.data(), &flag, MPI_STATUSES_IGNORE);
    if (flag) pending_.erase(it);
    return flag != 0;
  }
  void compute_after(uint64_t ticket) override {
    const auto it = pending_.find(ticket);
    if (it == pending_.end()) return;
    MPI_Waitall(static_cast<int>(it->second.size()), it->second.data(), MPI_STATUSES_IGNORE);
    pending_.erase(it);
  }
  void finish_compute() override {}

  uint64_t bytes_sent = 0, bytes_received = 0, receives = 0;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::map<uint64_t, std::vector<MPI_Request>> pending_;
  uint64_t tickets_ = 0;
};

}  // namespace pic_test
