#pragma once
// What ranks say to each other (formats: docs/cluster.md):
//  - rank 0 -> worker, tag kTagControl: a Command, either a Task (compute this segment) or
//    Shutdown; one tag for both, so a worker sees them in the order they were sent;
//  - worker -> rank 0, tags kTagEntryHeader + kTagEntryData: a finished segment entry, a
//    40-byte header (segment, size, chunk size, CRC32C) then the serialised entry in chunks;
//  - worker -> rank 0, tag kTagFailure: a FailureReport (rank, segment, what went wrong);
//  - worker -> rank 0, tag kTagDeviceEntry (the NCCL path, cluster/device_entries.hpp): an
//    entry's layout (segment, key, array names and shapes) and its small host arrays, while
//    the arrays' values go device to device through the DeviceLink.
// All ranks of a job run the same binary on the same architecture: numbers travel in the
// host's byte order, floats bit for bit.
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "hypic/error.hpp"
#include "store/entry.hpp"

namespace hypic::cluster {

// Tags of hypic's point-to-point traffic. Use a communicator of its own (Communicator::
// duplicate) so no other library's message can match them.
enum Tag : int {
  kTagControl = 0x4801,
  kTagEntryHeader = 0x4802,
  kTagEntryData = 0x4803,
  kTagFailure = 0x4804,
  kTagHello = 0x4805,  // worker -> rank 0, once: who this process is (cluster/watch.hpp)
  kTagDeviceEntry = 0x4806,
};

using Bytes = std::vector<uint8_t>;

// ---- segment entries ---------------------------------------------------------------------

// An entry with the identity it travels with.
struct EntryMessage {
  int64_t segment = 0;  // index of the segment in the prompt (or in the corpus plan)
  std::string key;      // the store key (store::entry_key)
  store::Entry entry;
};

// One contiguous buffer: magic, version, segment, key, n_tokens, then per array (in name order)
// its name, rank, dims and float32 values. deserialize_entry is its exact inverse (values bit
// for bit, NaN payloads included) and throws hypic::Error on a truncated or foreign buffer.
Bytes serialize_entry(int64_t segment, const std::string& key, const store::Entry& entry);
EntryMessage deserialize_entry(const uint8_t* data, size_t size);

// An entry's identity and its arrays' names and shapes, without their values: the same for an
// entry sent through MPI (decoded) and through NCCL (its header), which is what the NCCL path
// must keep (tests/unit/device_entries_test.cpp).
struct ArrayShape {
  std::string name;
  std::vector<int64_t> shape;
};
struct EntryLayout {
  int64_t segment = 0;
  std::string key;
  int64_t n_tokens = 0;
  std::vector<ArrayShape> arrays;  // in name order (the messages' and the store's order)
};
bool operator==(const ArrayShape& a, const ArrayShape& b);
bool operator==(const EntryLayout& a, const EntryLayout& b);
EntryLayout layout_of(int64_t segment, const std::string& key, const store::Entry& entry);

// The NCCL path's MPI message: the layout of the entry's arrays in device memory (their values
// follow through the DeviceLink, in this order) and its host arrays with their values (the
// worker's compute time). serialize_device_header takes an entry whose arrays are device
// tensors and host tensors; deserialize_device_header is its inverse.
struct DeviceEntryHeader {
  EntryLayout device;  // segment, key, n_tokens and the device arrays
  store::Entry host;   // the host arrays (n_tokens as above)
};
Bytes serialize_device_header(int64_t segment, const std::string& key, const store::Entry& entry);
DeviceEntryHeader deserialize_device_header(const uint8_t* data, size_t size);

// ---- rank 0 -> worker commands -----------------------------------------------------------

struct Task {
  int64_t segment = 0;
  std::string key;
  std::vector<int32_t> tokens;
  int32_t junction = -1;  // w, junction tokens (-1: the worker's own junction spec decides);
                          // a chat session changes the junction between questions
  // The entry goes to rank 0's device through the worker's DeviceLink (the NCCL path), not
  // through host memory and MPI; set by rank 0 only when both ends have a link.
  bool to_device = false;
  // Serve with --hit-reads owner|auto: the segment is a store hit in the shard this worker
  // reads; it sends the stored entry (marked kReadFromShardArray, distributed.hpp) instead of
  // computing one, and computes it only when its shard's copy is missing or damaged.
  bool read_stored = false;
};
struct Shutdown {};
using Command = std::variant<Task, Shutdown>;

Bytes serialize_command(const Command& command);
Command deserialize_command(const uint8_t* data, size_t size);

// ---- failures ----------------------------------------------------------------------------

struct FailureReport {
  int rank = -1;
  int64_t segment = -1;  // -1: the failure was not tied to a segment
  std::string key;
  std::string what;
};
// At most kMaxFailureBytes: a longer `what` is cut (and marked "...").
constexpr size_t kMaxFailureBytes = 4096;
Bytes serialize_failure(const FailureReport& report);
FailureReport deserialize_failure(const uint8_t* data, size_t size);
// "rank 2 failed on segment 7 (key 3f2a...): <what>"
std::string describe_failure(const FailureReport& report);

// What rank 0 throws when a worker reports a failure; what() is describe_failure(report).
class WorkerFailure : public Error {
 public:
  explicit WorkerFailure(FailureReport report)
      : Error(describe_failure(report)), report_(std::move(report)) {}
  const FailureReport& report() const { return report_; }

 private:
  FailureReport report_;
};

// ---- non-blocking sends ------------------------------------------------------------------

// Sends that own their buffers until MPI has finished with them. One post() is a group of
// messages (for example an entry's header and its chunks) that completes as a whole.
class SendQueue {
 public:
  struct Part {
    Bytes bytes;
    int tag = 0;
    size_t max_message = static_cast<size_t>(INT_MAX);  // split into messages of this size
  };

  explicit SendQueue(MPI_Comm comm) : comm_(comm) {}
  // Waits (at most a few seconds) for sends still in flight; a send that cannot complete then,
  // because its receiver is gone, is abandoned with its buffer rather than hanging the exit.
  ~SendQueue();
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // Posts the parts to `destination` in order, each as one or more MPI_Isend.
  void post(int destination, std::vector<Part> parts);
  // Completes what MPI has finished; returns the number of groups still in flight. Call it
  // between units of work: it also lets MPI progress the transfers.
  size_t test();
  void wait_all();
  size_t pending() const { return groups_.size(); }

 private:
  struct Group {
    std::vector<Bytes> buffers;
    std::vector<MPI_Request> requests;
  };
  MPI_Comm comm_;
  std::list<Group> groups_;
};

// Worker side: sends finished entries to the driver, non-blocking, in the order given.
class EntrySender {
 public:
  // 1 GiB chunks keep every MPI count below INT_MAX, whatever the entry's size.
  static constexpr size_t kDefaultChunkBytes = size_t{1} << 30;

  EntrySender(MPI_Comm comm, int destination, size_t chunk_bytes = kDefaultChunkBytes);
  void send(int64_t segment, const std::string& key, const store::Entry& entry);
  size_t test() { return queue_.test(); }  // entries still in flight
  void wait_all() { queue_.wait_all(); }
  size_t pending() const { return queue_.pending(); }

 private:
  int destination_;
  size_t chunk_bytes_;
  SendQueue queue_;
};

// Rank 0 side: sends tasks and shutdowns to workers.
class CommandSender {
 public:
  explicit CommandSender(MPI_Comm comm) : queue_(comm) {}
  void send(int worker, const Command& command);
  size_t test() { return queue_.test(); }
  void wait_all() { queue_.wait_all(); }

 private:
  SendQueue queue_;
};

// Worker side: the next command from `driver_rank`, blocking until it is there.
Command receive_command(MPI_Comm comm, int driver_rank);
// The same without blocking: nullopt when no command has arrived yet.
std::optional<Command> try_receive_command(MPI_Comm comm, int driver_rank);

// ---- receiving entries -------------------------------------------------------------------

struct ReceivedEntry {
  int source = -1;  // the rank that sent it
  int64_t segment = 0;
  std::string key;
  store::Entry entry;
};

// Driver side: receives entries from any rank as they come. A header receive and a failure
// receive are always posted, so waiting costs no polling, and a worker's failure report is
// seen while entries are still arriving.
class EntryReceiver {
 public:
  explicit EntryReceiver(MPI_Comm comm);
  ~EntryReceiver();  // cancels the posted receives (bounded wait, like SendQueue)
  EntryReceiver(const EntryReceiver&) = delete;
  EntryReceiver& operator=(const EntryReceiver&) = delete;

  // Entries completed since the last call, in completion order; never blocks. Throws
  // WorkerFailure when a failure report has arrived, hypic::Error on a damaged message.
  std::vector<ReceivedEntry> poll();
  // Blocks until at least one entry is complete (or a failure arrives). Blocks forever when
  // nothing is on its way: call it only while entries are expected.
  std::vector<ReceivedEntry> wait_some();
  // The NCCL path: called for each device-entry header with the header and its sender; returns
  // the entry's arrays (the host ones from the header, the device ones allocated and their
  // receives queued so that later compute sees them). Such an entry is complete at once. A
  // device header without a handler is an error.
  using DeviceEntryHandler = std::function<store::Entry(DeviceEntryHeader&&, int source)>;
  void set_device_handler(DeviceEntryHandler handler) { device_handler_ = std::move(handler); }
  size_t in_flight() const { return incoming_.size(); }  // headers in, data not yet complete

 private:
  struct Incoming;
  void post_header_receive();
  void post_failure_receive();
  void on_header(const MPI_Status& status);
  // Receives the device-entry headers that have arrived (probed: their size varies).
  void receive_device_headers();
  [[noreturn]] void on_failure(const MPI_Status& status);
  std::vector<ReceivedEntry> collect_complete();

  MPI_Comm comm_;
  std::vector<uint8_t> header_buffer_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  Bytes failure_buffer_;
  MPI_Request failure_request_ = MPI_REQUEST_NULL;
  DeviceEntryHandler device_handler_;
  std::vector<ReceivedEntry> device_ready_;  // device entries handed over by the handler
  std::list<Incoming> incoming_;
};

// Releases entries in prompt order, whatever order they arrive in: the combine driver
// composes segment i only after segments before it.
class PromptOrderBuffer {
 public:
  // The segments to expect, in the order to release them.
  explicit PromptOrderBuffer(std::vector<int64_t> order);
  // Throws hypic::Error for a segment not expected or already received.
  void put(ReceivedEntry entry);
  bool next_ready() const;
  ReceivedEntry pop_next();  // throws hypic::Error unless next_ready()
  bool done() const { return next_ == order_.size(); }
  size_t released() const { return next_; }
  size_t buffered() const { return arrived_.size(); }

 private:
  std::vector<int64_t> order_;
  std::map<int64_t, size_t> position_;  // segment -> index in order_
  std::map<size_t, ReceivedEntry> arrived_;
  size_t next_ = 0;
};

// ---- the abort path ----------------------------------------------------------------------

// Worker side: tells the driver that this rank failed on `segment` (blocking send of a small
// message). Afterwards the worker should keep waiting for commands: the driver ends the job.
void report_failure(MPI_Comm comm, int driver_rank, const FailureReport& report);

// Runs `work` for `task`; when it throws, reports the failure (this rank, the task's segment
// and key, the exception's text) to the driver and returns false instead of rethrowing.
bool run_or_report(MPI_Comm comm, int driver_rank, const Task& task,
                   const std::function<void()>& work);

}  // namespace hypic::cluster
