// The NCCL device link (device_link.hpp): segment entries from a worker's GPU to the combine
// rank's GPU, device to device. Every transfer is one ncclGroup of ncclSend (or ncclRecv), one
// per part, on a non-blocking stream of the link's own, so it does not wait for, nor hold up,
// the ops the backend queues on the legacy default stream; an event recorded on that stream
// first makes the transfer start after what the ops wrote. Not yet run on a GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <map>
#include <string>

#include "check.cuh"
#include "hypic/kernels/device_link.hpp"

namespace hypic::kernels {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(r));
}

class NcclLink final : public DeviceLink {
 public:
  NcclLink(const NcclId& id, int ranks, int rank) {
    ncclUniqueId uid;
    static_assert(sizeof(uid.internal) == kNcclIdBytes, "NCCL's unique id size changed");
    std::memcpy(uid.internal, id.data(), kNcclIdBytes);
    check_nccl(ncclCommInitRank(&comm_, ranks, uid, rank), "ncclCommInitRank");
    cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                "cudaStreamCreate (NCCL)");
  }
  ~NcclLink() override {
    for (auto& [ticket, event] : events_) cudaEventDestroy(event);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclLink(const NcclLink&) = delete;
  NcclLink& operator=(const NcclLink&) = delete;

  const char* name() const override { return "nccl"; }

  uint64_t send(const std::vector<Part>& parts, int peer) override {
    after_compute();
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const Part& p : parts)
      if (p.bytes > 0)
        check_nccl(ncclSend(p.data, p.bytes, ncclChar, peer, comm_, stream_), "ncclSend");
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (send)");
    return record();
  }
  uint64_t recv(const std::vector<Part>& parts, int peer) override {
    after_compute();  // the destinations were allocated and may be read by earlier frees
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const Part& p : parts)
      if (p.bytes > 0)
        check_nccl(ncclRecv(p.data, p.bytes, ncclChar, peer, comm_, stream_), "ncclRecv");
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (recv)");
    return record();
  }
  bool done(uint64_t ticket) override {
    const auto it = events_.find(ticket);
    if (it == events_.end()) return true;  // completed and forgotten
    const cudaError_t e = cudaEventQuery(it->second);
    if (e == cudaErrorNotReady) return false;
    cuda::check(e, "cudaEventQuery (NCCL transfer)");
    cudaEventDestroy(it->second);
    events_.erase(it);
    return true;
  }
  void compute_after(uint64_t ticket) override {
    const auto it = events_.find(ticket);
    if (it == events_.end()) return;
    cuda::check(cudaStreamWaitEvent(cudaStreamLegacy, it->second, 0), "cudaStreamWaitEvent");
  }
  void finish_compute() override {
    cuda::check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (compute)");
  }

 private:
  // The link's stream waits for the compute queued so far on the legacy default stream.
  void after_compute() {
    cudaEvent_t e = nullptr;
    cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(e, cudaStreamLegacy), "cudaEventRecord (compute)");
    cuda::check(cudaStreamWaitEvent(stream_, e, 0), "cudaStreamWaitEvent (NCCL)");
    cudaEventDestroy(e);  // released once the wait has been satisfied
  }
  uint64_t record() {
    cudaEvent_t e = nullptr;
    cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    cuda::check(cudaEventRecord(e, stream_), "cudaEventRecord (NCCL)");
    events_.emplace(++tickets_, e);
    return tickets_;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::map<uint64_t, cudaEvent_t> events_;  // transfers not yet seen complete
  uint64_t tickets_ = 0;
};

}  // namespace

std::string nccl_missing() {
  return "";
}

NcclId nccl_unique_id() {
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclId id;
  std::memcpy(id.data(), uid.internal, kNcclIdBytes);
  return id;
}

std::unique_ptr<DeviceLink> nccl_link(const NcclId& id, int ranks, int rank) {
  return std::make_unique<NcclLink>(id, ranks, rank);
}

}  // namespace hypic::kernels
