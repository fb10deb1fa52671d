// The NCCL device link (device_link.hpp): segment entries from a worker's GPU to the combine
// rank's GPU, device to device. Every transfer is one ncclGroup of ncclSend (or ncclRecv), one
// per part, on a non-blocking stream of the link's own, so it does not wait for, nor hold up,
// the ops the backend queues on the legacy default stream; an event recorded on that stream
// first makes the transfer start after what the ops wrote. Not yet run on a GPU.
//
// Events: one reused event orders each transfer after the compute; each ticket has an event
// from a recycling pool (device_book::TicketEvents) that goes back to the pool as soon as the
// transfer is seen complete: by done(), or by the sweep at every new transfer. A receive's
// ticket, which only compute_after() uses and nobody polls, so costs no event past its
// transfer (it used to keep one until the link was destroyed).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "check.cuh"
#include "hypic/kernels/device_book.hpp"
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
    cuda::check(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming),
                "cudaEventCreate (NCCL after compute)");
  }
  ~NcclLink() override {
    events_.reset();
    if (computed_ != nullptr) cudaEventDestroy(computed_);
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
  bool done(uint64_t ticket) override { return events_->done(ticket); }
  void compute_after(uint64_t ticket) override {
    const cudaEvent_t* e = events_->find(ticket);
    if (e == nullptr) return;  // complete
    cuda::check(cudaStreamWaitEvent(cudaStreamLegacy, *e, 0), "cudaStreamWaitEvent");
  }
  void finish_compute() override {
    cuda::check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (compute)");
  }

 private:
  // The link's stream waits for the compute queued so far on the legacy default stream.
  // (The wait takes the event's state when queued, so one event serves every transfer.)
  void after_compute() {
    cuda::check(cudaEventRecord(computed_, cudaStreamLegacy), "cudaEventRecord (compute)");
    cuda::check(cudaStreamWaitEvent(stream_, computed_, 0), "cudaStreamWaitEvent (NCCL)");
  }
  uint64_t record() {
    events_->reap();  // the events of the transfers completed since the last one
    const auto [ticket, e] = events_->issue();
    cuda::check(cudaEventRecord(e, stream_), "cudaEventRecord (NCCL)");
    return ticket;
  }

  struct EventOps {
    cudaEvent_t create() {
      cudaEvent_t e = nullptr;
      cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      return e;
    }
    bool ready(cudaEvent_t e) {
      const cudaError_t r = cudaEventQuery(e);
      if (r == cudaErrorNotReady) return false;
      cuda::check(r, "cudaEventQuery (NCCL transfer)");
      return true;
    }
    void destroy(cudaEvent_t e) noexcept { cudaEventDestroy(e); }
  };

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t computed_ = nullptr;  // the compute stream's point a transfer waits for
  std::unique_ptr<device_book::TicketEvents<EventOps>> events_ =
      std::make_unique<device_book::TicketEvents<EventOps>>(EventOps{});
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
