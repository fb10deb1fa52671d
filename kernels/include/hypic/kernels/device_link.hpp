#pragma once
// Device-to-device transfers between the ranks of a job (issue #14: segment entries from a
// worker's GPU to the combine rank's GPU). The link moves bytes between device memories only;
// what the bytes are, which segment, and in what order is said over MPI (cluster/
// device_entries.hpp). One implementation is NCCL (kernels/cuda/nccl_link.cu: ncclSend /
// ncclRecv on a stream of their own); the MPI tests use a stand-in over a device that keeps its
// memory on the host (tests/mpi/mpi_device_link.hpp).
//
// Ordering: a transfer starts after everything queued so far on the compute stream (a send
// reads what the ops wrote), and runs beside the compute queued after it (the overlap). Sends
// to one peer match that peer's receives from this rank in the order both were queued.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hypic::kernels {

class DeviceLink {
 public:
  struct Part {  // device memory of this rank's backend
    void* data = nullptr;
    size_t bytes = 0;
  };
  virtual ~DeviceLink() = default;
  virtual const char* name() const = 0;
  // Queues the parts to `peer` (received there by one recv() with parts of the same sizes),
  // after the compute queued so far; returns a ticket. The parts stay allocated and unchanged
  // until done(ticket).
  virtual uint64_t send(const std::vector<Part>& parts, int peer) = 0;
  // Queues the receive of one send() of `peer` into the parts; returns a ticket.
  virtual uint64_t recv(const std::vector<Part>& parts, int peer) = 0;
  // Whether the transfer `ticket` is complete (never blocks).
  virtual bool done(uint64_t ticket) = 0;
  // Makes the compute queued from now on wait for transfer `ticket` (a receive's data is then
  // there for every later op), without blocking the host.
  virtual void compute_after(uint64_t ticket) = 0;
  // Blocks until the compute queued so far is done, not the transfers (timing a segment).
  virtual void finish_compute() = 0;
};

// NCCL's unique id: made on one rank, sent to all over MPI, given to every rank's nccl_link.
constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<unsigned char, kNcclIdBytes>;

// Why this build cannot link GPUs with NCCL; empty when it can (built with CUDA and NCCL).
std::string nccl_missing();
NcclId nccl_unique_id();
// Collective over the `ranks` ranks that share `id` (ncclCommInitRank on the current CUDA device:
// call after cuda::set_device). Throws hypic::Error when NCCL fails.
std::unique_ptr<DeviceLink> nccl_link(const NcclId& id, int ranks, int rank);

}  // namespace hypic::kernels
