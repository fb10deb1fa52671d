#pragma once
// The NCCL path of segment entries (issue #14; docs/cluster.md, "Ranks and GPUs"): a worker
// computes an entry resident on its GPU and sends its arrays device to device through a
// kernels::DeviceLink (NCCL), while MPI stays the control channel: the entry's segment, key
// and array shapes (and its compute time) go ahead in a device-entry header (messages.hpp),
// from which rank 0 allocates the arrays on its GPU and queues the matching receives. Sends to
// rank 0 and rank 0's receives from one worker are queued in the same order (MPI keeps the
// headers of one sender in order), which is how NCCL pairs them.
#include <mpi.h>

#include <cstdint>
#include <list>
#include <string>
#include <utility>

#include "cluster/messages.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device_link.hpp"
#include "store/entry.hpp"

namespace hypic::cluster {

// Worker side: sends entries whose arrays are device tensors (and small host ones).
class DeviceEntrySender {
 public:
  DeviceEntrySender(MPI_Comm comm, kernels::DeviceLink& link, int destination)
      : link_(link), destination_(destination), queue_(comm) {}
  ~DeviceEntrySender();  // waits (bounded) for the transfers before their arrays are freed
  DeviceEntrySender(const DeviceEntrySender&) = delete;
  DeviceEntrySender& operator=(const DeviceEntrySender&) = delete;

  // Queues the device arrays (name order) through the link, after the compute that wrote
  // them, then the header through MPI; returns at once. `entry` is kept until the link is done.
  void send(int64_t segment, const std::string& key, store::Entry&& entry);
  size_t test();  // frees the entries whose transfer is done; returns those still in flight
  void wait_all();

 private:
  kernels::DeviceLink& link_;
  int destination_;
  SendQueue queue_;
  std::list<std::pair<uint64_t, store::Entry>> in_flight_;  // link ticket, the arrays it reads
};

// Rank 0 side (EntryReceiver::set_device_handler): the arrays of a device-entry header, the
// device ones allocated on `be` with their receive from `source` queued and every later op of
// `be` ordered after it; the host ones as the header carried them.
store::Entry receive_device_arrays(const kernels::Backend& be, kernels::DeviceLink& link,
                                   DeviceEntryHeader&& header, int source);

}  // namespace hypic::cluster
