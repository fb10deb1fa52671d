#include "cluster/messages.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "cluster/world.hpp"
#include "common/copy_stats.hpp"
#include "store/checksum.hpp"

namespace hypic::cluster {

namespace {

constexpr uint32_t kEntryMagic = 0x45505948;    // "HYPE" as little-endian bytes
constexpr uint32_t kCommandMagic = 0x43505948;  // "HYPC"
constexpr uint32_t kFailureMagic = 0x46505948;  // "HYPF"
constexpr uint32_t kDeviceMagic = 0x44505948;   // "HYPD"
constexpr uint64_t kHeaderMagic = 0x3148444850594831;
constexpr uint32_t kEntryVersion = 1;
constexpr uint32_t kCommandTask = 1;
constexpr uint32_t kCommandShutdown = 2;
constexpr auto kAbandonAfter = std::chrono::seconds(5);

// The fixed header that precedes an entry's data: enough to allocate and post the receives.
struct WireHeader {
  uint64_t magic = kHeaderMagic;
  int64_t segment = 0;
  uint64_t total_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint32_t crc = 0;  // CRC32C of the serialised entry
  uint32_t reserved = 0;
};
static_assert(sizeof(WireHeader) == 40 && std::is_trivially_copyable_v<WireHeader>);

class Writer {
 public:
  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&value, sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    append(s.data(), s.size());
  }
  void append(const void* data, size_t size) {
    const size_t at = bytes_.size();
    bytes_.resize(at + size);
    if (size > 0) std::memcpy(bytes_.data() + at, data, size);
  }
  void reserve(size_t size) { bytes_.reserve(size); }
  Bytes take() { return std::move(bytes_); }

 private:
  Bytes bytes_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* what)
      : data_(data), size_(size), what_(what) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    read(&value, sizeof(T));
    return value;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return s;
  }
  void read(void* out, size_t size) {
    need(size);
    if (size > 0) std::memcpy(out, data_ + at_, size);
    at_ += size;
  }
  void need(size_t size) const {
    if (size > size_ - at_) {
      throw Error(std::string(what_) + " is truncated: needs " + std::to_string(at_ + size) +
                  " bytes, has " + std::to_string(size_) +
                  " (sender and receiver built from different hypic versions?)");
    }
  }
  // The same for `count` items of `item_size` bytes, without a product that could wrap (a
  // damaged count must not pass as a small one and then be allocated).
  void need_items(uint64_t count, size_t item_size) const {
    if (count > (size_ - at_) / item_size) {
      throw Error(std::string(what_) + " is truncated: needs " + std::to_string(count) +
                  " values of " + std::to_string(item_size) + " bytes, has " +
                  std::to_string(size_ - at_) + " bytes left");
    }
  }
  size_t remaining() const { return size_ - at_; }
  void expect_end() const {
    HYPIC_REQUIRE(at_ == size_, std::string(what_) + " has " + std::to_string(size_ - at_) +
                                    " unexpected trailing bytes");
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  const char* what_;
};

int checked_count(size_t bytes) {
  HYPIC_REQUIRE(bytes <= static_cast<size_t>(INT_MAX),
                "message of " + std::to_string(bytes) + " bytes exceeds MPI's int count");
  return static_cast<int>(bytes);
}

// Waits for `requests` to complete for at most kAbandonAfter; what is still pending then is
// freed without completing. Returns false when something had to be abandoned. While an
// exception unwinds (a worker failed or died, and the job is about to end) it does not wait:
// a peer that is gone never completes, and the launcher may kill this rank within a second.
bool drain(std::vector<MPI_Request>& requests) {
  const auto deadline = std::chrono::steady_clock::now() +
                        (std::uncaught_exceptions() > 0 ? std::chrono::seconds(0) : kAbandonAfter);
  while (true) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (MPI_Request& r : requests) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  return false;
}

// Buffers that MPI may still read or write after their request was abandoned: kept until exit
// in a list reachable from here, so that a leak checker counts them as in use, not as leaked
// (moving a vector keeps its heap block where MPI expects it).
void keep_until_exit(Bytes&& buffer) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Bytes>();
  const std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buffer));
}

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

}  // namespace

// ---- entries -----------------------------------------------------------------------------

Bytes serialize_entry(int64_t segment, const std::string& key, const store::Entry& entry) {
  size_t size = 64 + key.size();
  for (const auto& [name, tensor] : entry.arrays) {
    size += 32 + name.size() + 8 * tensor.shape().size() + tensor.bytes();
  }
  Writer w;
  w.reserve(size);
  w.put(kEntryMagic);
  w.put(kEntryVersion);
  w.put(segment);
  w.put_string(key);
  w.put(entry.n_tokens);
  w.put(static_cast<uint32_t>(entry.arrays.size()));
  for (const auto& [name, tensor] : entry.arrays) {
    w.put_string(name);
    w.put(static_cast<uint32_t>(tensor.rank()));
    for (int64_t d : tensor.shape()) w.put(d);
    w.put(static_cast<uint64_t>(tensor.numel()));
    w.append(tensor.data(), tensor.bytes());
  }
  return w.take();
}

EntryMessage deserialize_entry(const uint8_t* data, size_t size) {
  Reader r(data, size, "entry message");
  HYPIC_REQUIRE(r.get<uint32_t>() == kEntryMagic, "entry message has a wrong magic number");
  const uint32_t version = r.get<uint32_t>();
  HYPIC_REQUIRE(version == kEntryVersion, "entry message version " + std::to_string(version) +
                                              " is not " + std::to_string(kEntryVersion) +
                                              "; run the same hypic binary on every rank");
  EntryMessage m;
  m.segment = r.get<int64_t>();
  m.key = r.get_string();
  m.entry.n_tokens = r.get<int64_t>();
  const uint32_t n_arrays = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_arrays; ++i) {
    std::string name = r.get_string();
    const uint32_t rank = r.get<uint32_t>();
    HYPIC_REQUIRE(rank <= 16,
                  "entry message: array '" + name + "' has rank " + std::to_string(rank));
    std::vector<int64_t> shape(rank);
    for (int64_t& d : shape) {
      d = r.get<int64_t>();
      HYPIC_REQUIRE(d >= 0, "entry message: array '" + name + "' has a negative dimension");
    }
    const uint64_t count = r.get<uint64_t>();
    r.need_items(count, sizeof(float));
    // The shape's product, checked: one that wraps could equal a small count.
    uint64_t expected = 1;
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
      expected = 0;
    } else {
      for (int64_t d : shape) {
        HYPIC_REQUIRE(expected <= count / static_cast<uint64_t>(d),
                      "entry message: array '" + name + "' has a shape of more than the " +
                          std::to_string(count) + " values it holds");
        expected *= static_cast<uint64_t>(d);
      }
    }
    HYPIC_REQUIRE(count == expected, "entry message: array '" + name + "' holds " +
                                         std::to_string(count) + " values for shape of " +
                                         std::to_string(expected));
    Tensor t(std::move(shape));
    r.read(t.data(), t.bytes());
    stats::count_entry_copy(t.bytes());
    HYPIC_REQUIRE(m.entry.arrays.emplace(std::move(name), std::move(t)).second,
                  "entry message names an array twice");
  }
  r.expect_end();
  return m;
}

// ---- entry layouts and the NCCL path's header ---------------------------------------------

bool operator==(const ArrayShape& a, const ArrayShape& b) {
  return a.name == b.name && a.shape == b.shape;
}

bool operator==(const EntryLayout& a, const EntryLayout& b) {
  return a.segment == b.segment && a.key == b.key && a.n_tokens == b.n_tokens &&
         a.arrays == b.arrays;
}

EntryLayout layout_of(int64_t segment, const std::string& key, const store::Entry& entry) {
  EntryLayout l{segment, key, entry.n_tokens, {}};
  for (const auto& [name, tensor] : entry.arrays) l.arrays.push_back({name, tensor.shape()});
  return l;
}

Bytes serialize_device_header(int64_t segment, const std::string& key, const store::Entry& entry) {
  store::Entry host;
  host.n_tokens = entry.n_tokens;
  Writer w;
  w.put(kDeviceMagic);
  w.put(kEntryVersion);
  uint32_t n_device = 0;
  for (const auto& [name, tensor] : entry.arrays) n_device += tensor.device() != Device::Host;
  w.put(n_device);
  for (const auto& [name, tensor] : entry.arrays) {
    if (tensor.device() == Device::Host) {
      host.arrays.emplace(name, tensor);
      continue;
    }
    HYPIC_REQUIRE(tensor.dtype() == DType::F32, "device entry array " + name + " is not f32 (" +
                                                    dtype_name(tensor.dtype()) + ")");
    w.put_string(name);
    w.put(static_cast<uint32_t>(tensor.rank()));
    for (int64_t d : tensor.shape()) w.put(d);
  }
  // The identity and the host arrays as an entry message of their own (same checks on read).
  const Bytes rest = serialize_entry(segment, key, host);
  w.append(rest.data(), rest.size());
  return w.take();
}

DeviceEntryHeader deserialize_device_header(const uint8_t* data, size_t size) {
  Reader r(data, size, "device entry header");
  HYPIC_REQUIRE(r.get<uint32_t>() == kDeviceMagic, "device entry header has a wrong magic number");
  const uint32_t version = r.get<uint32_t>();
  HYPIC_REQUIRE(version == kEntryVersion, "device entry header version " + std::to_string(version) +
                                              "; run the same hypic binary on every rank");
  const uint32_t n_device = r.get<uint32_t>();
  DeviceEntryHeader h;
  for (uint32_t i = 0; i < n_device; ++i) {
    ArrayShape a;
    a.name = r.get_string();
    const uint32_t rank = r.get<uint32_t>();
    HYPIC_REQUIRE(rank <= 16,
                  "device entry header: array '" + a.name + "' has rank " + std::to_string(rank));
    r.need_items(rank, sizeof(int64_t));
    a.shape.resize(rank);
    for (int64_t& d : a.shape) {
      d = r.get<int64_t>();
      HYPIC_REQUIRE(d >= 0, "device entry header: array '" + a.name + "' has a negative dimension");
    }
    HYPIC_REQUIRE(h.device.arrays.empty() || h.device.arrays.back().name < a.name,
                  "device entry header: arrays out of order or named twice");
    h.device.arrays.push_back(std::move(a));
  }
  const size_t at = size - r.remaining();
  EntryMessage m = deserialize_entry(data + at, size - at);
  for (const auto& [name, tensor] : m.entry.arrays)
    for (const ArrayShape& a : h.device.arrays)
      HYPIC_REQUIRE(a.name != name, "device entry header names array " + name + " twice");
  h.device.segment = m.segment;
  h.device.key = std::move(m.key);
  h.device.n_tokens = m.entry.n_tokens;
  h.host = std::move(m.entry);
  return h;
}

// ---- commands ----------------------------------------------------------------------------

Bytes serialize_command(const Command& command) {
  Writer w;
  w.put(kCommandMagic);
  if (const Task* task = std::get_if<Task>(&command)) {
    w.put(kCommandTask);
    w.put(task->segment);
    w.put_string(task->key);
    w.put(static_cast<uint64_t>(task->tokens.size()));
    w.append(task->tokens.data(), task->tokens.size() * sizeof(int32_t));
    w.put(task->junction);
    w.put(static_cast<uint8_t>(task->to_device ? 1 : 0));
    w.put(static_cast<uint8_t>(task->read_stored ? 1 : 0));
  } else {
    w.put(kCommandShutdown);
  }
  return w.take();
}

Command deserialize_command(const uint8_t* data, size_t size) {
  Reader r(data, size, "command message");
  HYPIC_REQUIRE(r.get<uint32_t>() == kCommandMagic, "command message has a wrong magic number");
  const uint32_t kind = r.get<uint32_t>();
  if (kind == kCommandShutdown) {
    r.expect_end();
    return Shutdown{};
  }
  HYPIC_REQUIRE(kind == kCommandTask, "command message of unknown kind " + std::to_string(kind));
  Task task;
  task.segment = r.get<int64_t>();
  task.key = r.get_string();
  const uint64_t n = r.get<uint64_t>();
  r.need_items(n, sizeof(int32_t));
  task.tokens.resize(n);
  r.read(task.tokens.data(), n * sizeof(int32_t));
  task.junction = r.get<int32_t>();
  const uint8_t to_device = r.get<uint8_t>();
  HYPIC_REQUIRE(to_device <= 1, "command message: bad entry route " + std::to_string(to_device));
  task.to_device = to_device == 1;
  const uint8_t read_stored = r.get<uint8_t>();
  HYPIC_REQUIRE(read_stored <= 1,
                "command message: bad stored-entry flag " + std::to_string(read_stored));
  task.read_stored = read_stored == 1;
  r.expect_end();
  return task;
}

// ---- failures ----------------------------------------------------------------------------

Bytes serialize_failure(const FailureReport& report) {
  const size_t fixed = 4 + 4 + 8 + 4 + report.key.size() + 4;
  HYPIC_REQUIRE(fixed + 3 < kMaxFailureBytes, "failure report key is too long");
  std::string what = report.what;
  if (fixed + what.size() > kMaxFailureBytes) {
    what = what.substr(0, kMaxFailureBytes - fixed - 3) + "...";
  }
  Writer w;
  w.put(kFailureMagic);
  w.put(static_cast<int32_t>(report.rank));
  w.put(report.segment);
  w.put_string(report.key);
  w.put_string(what);
  return w.take();
}

FailureReport deserialize_failure(const uint8_t* data, size_t size) {
  Reader r(data, size, "failure report");
  HYPIC_REQUIRE(r.get<uint32_t>() == kFailureMagic, "failure report has a wrong magic number");
  FailureReport report;
  report.rank = r.get<int32_t>();
  report.segment = r.get<int64_t>();
  report.key = r.get_string();
  report.what = r.get_string();
  r.expect_end();
  return report;
}

std::string describe_failure(const FailureReport& report) {
  std::string text = "rank " + std::to_string(report.rank) + " failed";
  if (report.segment >= 0) {
    text += " on segment " + std::to_string(report.segment);
    if (!report.key.empty()) text += " (key " + report.key + ")";
  }
  return text + ": " + report.what;
}

// ---- SendQueue ---------------------------------------------------------------------------

SendQueue::~SendQueue() {
  if (groups_.empty() || !mpi_active()) return;
  std::vector<MPI_Request> all;
  for (Group& g : groups_) all.insert(all.end(), g.requests.begin(), g.requests.end());
  if (!drain(all)) {
    // MPI may still read the buffers of abandoned sends: keep them alive until exit.
    for (Group& g : groups_)
      for (Bytes& b : g.buffers) keep_until_exit(std::move(b));
  }
}

void SendQueue::post(int destination, std::vector<Part> parts) {
  Group group;
  for (Part& part : parts) {
    HYPIC_REQUIRE(part.max_message >= 1, "SendQueue: max_message must be >= 1");
    group.buffers.push_back(std::move(part.bytes));
    const Bytes& bytes = group.buffers.back();
    size_t at = 0;
    do {
      const size_t n = std::min(part.max_message, bytes.size() - at);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(bytes.data() + at, checked_count(n), MPI_BYTE, destination, part.tag,
                          comm_, &request),
                "MPI_Isend");
      group.requests.push_back(request);
      at += n;
    } while (at < bytes.size());
  }
  groups_.push_back(std::move(group));
}

size_t SendQueue::test() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall");
    it = done ? groups_.erase(it) : std::next(it);
  }
  return groups_.size();
}

void SendQueue::wait_all() {
  for (Group& g : groups_) {
    check_mpi(
        MPI_Waitall(static_cast<int>(g.requests.size()), g.requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
  }
  groups_.clear();
}

// ---- EntrySender, CommandSender, receive_command -----------------------------------------

EntrySender::EntrySender(MPI_Comm comm, int destination, size_t chunk_bytes)
    : destination_(destination), chunk_bytes_(chunk_bytes), queue_(comm) {
  HYPIC_REQUIRE(chunk_bytes >= 1 && chunk_bytes <= static_cast<size_t>(INT_MAX),
                "EntrySender: chunk size must be between 1 and INT_MAX bytes");
}

void EntrySender::send(int64_t segment, const std::string& key, const store::Entry& entry) {
  Bytes payload = serialize_entry(segment, key, entry);
  WireHeader header;
  header.segment = segment;
  header.total_bytes = payload.size();
  header.chunk_bytes = chunk_bytes_;
  header.crc = store::crc32c(payload.data(), payload.size());
  Bytes header_bytes(sizeof(WireHeader));
  std::memcpy(header_bytes.data(), &header, sizeof(WireHeader));
  std::vector<SendQueue::Part> parts;
  parts.push_back({std::move(header_bytes), kTagEntryHeader, sizeof(WireHeader)});
  parts.push_back({std::move(payload), kTagEntryData, chunk_bytes_});
  queue_.post(destination_, std::move(parts));
  queue_.test();  // let MPI start moving it
}

void CommandSender::send(int worker, const Command& command) {
  std::vector<SendQueue::Part> parts;
  parts.push_back({serialize_command(command), kTagControl});
  queue_.post(worker, std::move(parts));
}

namespace {

Command receive_matched(MPI_Message& message, const MPI_Status& status) {
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  Bytes bytes(static_cast<size_t>(count));
  check_mpi(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return deserialize_command(bytes.data(), bytes.size());
}

}  // namespace

Command receive_command(MPI_Comm comm, int driver_rank) {
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  check_mpi(MPI_Mprobe(driver_rank, kTagControl, comm, &message, &status), "MPI_Mprobe");
  return receive_matched(message, status);
}

std::optional<Command> try_receive_command(MPI_Comm comm, int driver_rank) {
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  int found = 0;
  check_mpi(MPI_Improbe(driver_rank, kTagControl, comm, &found, &message, &status), "MPI_Improbe");
  if (!found) return std::nullopt;
  return receive_matched(message, status);
}

// ---- EntryReceiver -----------------------------------------------------------------------

struct EntryReceiver::Incoming {
  int source = -1;
  WireHeader header;
  Bytes buffer;
  std::vector<MPI_Request> requests;
};

EntryReceiver::EntryReceiver(MPI_Comm comm)
    : comm_(comm), header_buffer_(sizeof(WireHeader)), failure_buffer_(kMaxFailureBytes) {
  post_header_receive();
  post_failure_receive();
}

EntryReceiver::~EntryReceiver() {
  if (!mpi_active()) return;
  std::vector<MPI_Request> all;
  for (MPI_Request* r : {&header_request_, &failure_request_}) {
    if (*r != MPI_REQUEST_NULL) MPI_Cancel(r);
    all.push_back(*r);
  }
  for (Incoming& in : incoming_) {
    for (MPI_Request& r : in.requests) {
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
      all.push_back(r);
    }
  }
  if (!drain(all)) {
    // Receives MPI may still write into: their buffers must outlive it.
    keep_until_exit(std::move(header_buffer_));
    keep_until_exit(std::move(failure_buffer_));
    for (Incoming& in : incoming_) keep_until_exit(std::move(in.buffer));
  }
}

void EntryReceiver::post_header_receive() {
  check_mpi(MPI_Irecv(header_buffer_.data(), static_cast<int>(header_buffer_.size()), MPI_BYTE,
                      MPI_ANY_SOURCE, kTagEntryHeader, comm_, &header_request_),
            "MPI_Irecv(entry header)");
}

void EntryReceiver::post_failure_receive() {
  check_mpi(MPI_Irecv(failure_buffer_.data(), static_cast<int>(failure_buffer_.size()), MPI_BYTE,
                      MPI_ANY_SOURCE, kTagFailure, comm_, &failure_request_),
            "MPI_Irecv(failure report)");
}

void EntryReceiver::on_header(const MPI_Status& status) {
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  WireHeader header;
  std::memcpy(&header, header_buffer_.data(), sizeof(WireHeader));
  const int source = status.MPI_SOURCE;
  post_header_receive();
  HYPIC_REQUIRE(
      count == static_cast<int>(sizeof(WireHeader)) && header.magic == kHeaderMagic,
      "rank " + std::to_string(source) +
          " sent something that is not an entry header; run the same hypic on every rank");
  HYPIC_REQUIRE(header.chunk_bytes >= 1 && header.chunk_bytes <= static_cast<uint64_t>(INT_MAX),
                "entry header from rank " + std::to_string(source) + " has a bad chunk size");

  Incoming& in = incoming_.emplace_back();
  in.source = source;
  in.header = header;
  in.buffer.resize(header.total_bytes);
  // Chunks from one source arrive in the order sent and fill the receives in the order
  // posted, so posting them now, in order, puts every chunk in its place.
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(header.chunk_bytes, in.buffer.size() - at);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(in.buffer.data() + at, static_cast<int>(n), MPI_BYTE, source, kTagEntryData,
                        comm_, &request),
              "MPI_Irecv(entry data)");
    in.requests.push_back(request);
    at += n;
  } while (at < in.buffer.size());
}

void EntryReceiver::on_failure(const MPI_Status& status) {
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  FailureReport report;
  try {
    report = deserialize_failure(failure_buffer_.data(), static_cast<size_t>(count));
  } catch (const Error& e) {
    report.rank = status.MPI_SOURCE;
    report.what = std::string("(unreadable failure report: ") + e.what() + ")";
  }
  post_failure_receive();
  throw WorkerFailure(std::move(report));
}

void EntryReceiver::receive_device_headers() {
  for (;;) {
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    int found = 0;
    check_mpi(MPI_Improbe(MPI_ANY_SOURCE, kTagDeviceEntry, comm_, &found, &message, &status),
              "MPI_Improbe(device entry)");
    if (!found) return;
    int count = 0;
    check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    Bytes bytes(static_cast<size_t>(count));
    check_mpi(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE),
              "MPI_Mrecv(device entry)");
    const int source = status.MPI_SOURCE;
    const std::string from = "device entry from rank " + std::to_string(source);
    HYPIC_REQUIRE(device_handler_ != nullptr,
                  from + ", but this rank has no device link (run the same hypic on every rank)");
    DeviceEntryHeader h;
    try {
      h = deserialize_device_header(bytes.data(), bytes.size());
    } catch (const Error& e) {
      throw Error(from + ": " + e.what());
    }
    const int64_t segment = h.device.segment;
    std::string key = h.device.key;
    store::Entry entry = device_handler_(std::move(h), source);
    device_ready_.push_back({source, segment, std::move(key), std::move(entry)});
  }
}

std::vector<ReceivedEntry> EntryReceiver::collect_complete() {
  std::vector<ReceivedEntry> out = std::move(device_ready_);
  device_ready_.clear();
  for (auto it = incoming_.begin(); it != incoming_.end();) {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall(entry data)");
    if (!done) {
      ++it;
      continue;
    }
    const std::string from = "entry from rank " + std::to_string(it->source);
    HYPIC_REQUIRE(store::crc32c(it->buffer.data(), it->buffer.size()) == it->header.crc,
                  from + " for segment " + std::to_string(it->header.segment) +
                      " fails its CRC32C check: the message was damaged in transit");
    EntryMessage m;
    try {
      m = deserialize_entry(it->buffer.data(), it->buffer.size());
    } catch (const Error& e) {
      throw Error(from + ": " + e.what());
    }
    HYPIC_REQUIRE(m.segment == it->header.segment,
                  from + " names segment " + std::to_string(m.segment) + " in its body but " +
                      std::to_string(it->header.segment) + " in its header");
    out.push_back({it->source, m.segment, std::move(m.key), std::move(m.entry)});
    it = incoming_.erase(it);
  }
  return out;
}

std::vector<ReceivedEntry> EntryReceiver::poll() {
  while (true) {
    MPI_Status status;
    int arrived = 0;
    check_mpi(MPI_Test(&failure_request_, &arrived, &status), "MPI_Test(failure)");
    if (arrived) on_failure(status);
    check_mpi(MPI_Test(&header_request_, &arrived, &status), "MPI_Test(entry header)");
    if (!arrived) break;
    on_header(status);
  }
  receive_device_headers();
  return collect_complete();
}

std::vector<ReceivedEntry> EntryReceiver::wait_some() {
  while (true) {
    std::vector<ReceivedEntry> out = poll();
    if (!out.empty()) return out;
    if (device_handler_) {  // device headers are probed, not posted: no MPI_Waitany for them
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    // Sleep in MPI until anything happens: a failure, a header, or a chunk of data.
    std::vector<MPI_Request> requests{failure_request_, header_request_};
    std::vector<MPI_Request*> owners{&failure_request_, &header_request_};
    for (Incoming& in : incoming_) {
      for (MPI_Request& r : in.requests) {
        if (r == MPI_REQUEST_NULL) continue;
        requests.push_back(r);
        owners.push_back(&r);
      }
    }
    int index = MPI_UNDEFINED;
    MPI_Status status;
    check_mpi(MPI_Waitany(static_cast<int>(requests.size()), requests.data(), &index, &status),
              "MPI_Waitany");
    if (index == MPI_UNDEFINED) continue;
    *owners[static_cast<size_t>(index)] = requests[static_cast<size_t>(index)];
    if (index == 0) on_failure(status);
    if (index == 1) on_header(status);
  }
}

// ---- PromptOrderBuffer -------------------------------------------------------------------

PromptOrderBuffer::PromptOrderBuffer(std::vector<int64_t> order) : order_(std::move(order)) {
  for (size_t i = 0; i < order_.size(); ++i) {
    HYPIC_REQUIRE(position_.emplace(order_[i], i).second,
                  "segment " + std::to_string(order_[i]) + " is listed twice in the prompt order");
  }
}

void PromptOrderBuffer::put(ReceivedEntry entry) {
  const auto pos = position_.find(entry.segment);
  HYPIC_REQUIRE(pos != position_.end(), "received segment " + std::to_string(entry.segment) +
                                            " from rank " + std::to_string(entry.source) +
                                            ", which this query did not ask for");
  HYPIC_REQUIRE(pos->second >= next_ && arrived_.count(pos->second) == 0,
                "received segment " + std::to_string(entry.segment) + " twice (again from rank " +
                    std::to_string(entry.source) + ")");
  arrived_.emplace(pos->second, std::move(entry));
}

bool PromptOrderBuffer::next_ready() const {
  return arrived_.count(next_) != 0;
}

ReceivedEntry PromptOrderBuffer::pop_next() {
  const auto it = arrived_.find(next_);
  HYPIC_REQUIRE(it != arrived_.end(),
                "PromptOrderBuffer::pop_next: segment " +
                    (done() ? std::string("(none: all released)") : std::to_string(order_[next_])) +
                    " has not arrived");
  ReceivedEntry entry = std::move(it->second);
  arrived_.erase(it);
  ++next_;
  return entry;
}

// ---- abort path --------------------------------------------------------------------------

void report_failure(MPI_Comm comm, int driver_rank, const FailureReport& report) {
  Bytes bytes = serialize_failure(report);
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(bytes.data(), checked_count(bytes.size()), MPI_BYTE, driver_rank, kTagFailure,
                      comm, &request),
            "MPI_Isend(failure report)");
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait(failure report)");
}

bool run_or_report(MPI_Comm comm, int driver_rank, const Task& task,
                   const std::function<void()>& work) {
  std::string what;
  try {
    work();
    return true;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  report_failure(comm, driver_rank, {rank, task.segment, task.key, what});
  return false;
}

}  // namespace hypic::cluster
