#pragma once
// A worker rank that dies without reporting (SIGKILL, out of memory) cannot send a
// FailureReport. WorkerWatch lets rank 0 name it anyway, with the segment it held
// (docs/cluster.md, "A worker that dies"):
//  - every worker announces itself once (announce_worker: rank, PID, host, PID namespace);
//  - rank 0 records which segments each worker holds (assigned, entry not yet received);
//  - rank 0 checks the workers that share its node (same host and PID namespace) while it
//    waits for entries: a worker that holds work and whose process is gone is reported;
//  - a worker on another node is watched through its lifeline (lifeline.hpp): a TCP connection
//    rank 0 holds to a socket the worker keeps open; reset when the worker dies, timed out by
//    keep-alive when its node or link goes down;
//  - a SIGCONT / SIGTERM handler does the same check when rank 0 is busy: Open MPI's mpirun
//    sends SIGCONT to every surviving rank as soon as one dies, SIGTERM one second later
//    and SIGKILL one second after that. On SIGTERM without a dead local worker (a worker on
//    another node, or Ctrl-C), it lists what every worker held. The handler uses only
//    async-signal-safe calls (kill, write) on messages prepared in advance.
// Exactly one line is printed per death, "hypic: error: worker rank R (pid P on HOST) died
// while computing segment S (…); <what the caller says about the store>".
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/lifeline.hpp"
#include "hypic/error.hpp"

namespace hypic::cluster {

// Who a process is, as far as liveness checks go.
struct ProcessIdentity {
  int rank = -1;
  int64_t pid = 0;
  std::string host;            // gethostname
  std::string pid_namespace;   // readlink /proc/self/ns/pid ("" when unknown)
  uint16_t lifeline_port = 0;  // a worker's lifeline listener (lifeline.hpp); 0: none
};
ProcessIdentity this_process(MPI_Comm comm);
std::vector<uint8_t> serialize_identity(const ProcessIdentity& id);
ProcessIdentity deserialize_identity(const uint8_t* data, size_t size);

// Worker side: tells `driver_rank` who this process is and the port of its lifeline (one small
// message, tag kTagHello).
// Every call must be matched by a WorkerWatch on the driver (run_worker calls it once).
void announce_worker(MPI_Comm comm, int driver_rank);

// True when the process `pid` no longer exists on this node (or is a zombie).
bool process_gone(int64_t pid);

// What rank 0 throws when it finds a worker gone. When `printed()` is true the line was
// already written to stderr (by the signal handler or the check); the command's edge then
// prints nothing more.
class WorkerDied : public Error {
 public:
  WorkerDied(int rank, int64_t segment, const std::string& what, bool printed)
      : Error(what), rank_(rank), segment_(segment), printed_(printed) {}
  int rank() const { return rank_; }
  int64_t segment() const { return segment_; }
  bool printed() const { return printed_; }

 private:
  int rank_;
  int64_t segment_;
  bool printed_;
};

namespace detail {
struct WatchShared;  // what the signal handler reads (watch.cpp)
}

// Rank 0's view of what every worker holds. Not thread-safe; the signal handler only reads.
class WorkerWatch {
 public:
  // Posts a receive for each worker's announcement, and (with `install_handlers`) installs the
  // SIGCONT/SIGTERM handlers, restoring the previous ones at destruction. `after_death` ends
  // every message, for example "store S keeps every entry committed so far; rerun to resume".
  // `all_remote` (tests) watches every worker through its lifeline, as if on another node.
  WorkerWatch(MPI_Comm comm, std::string after_death, bool install_handlers = true,
              bool all_remote = false);
  ~WorkerWatch();
  WorkerWatch(const WorkerWatch&) = delete;
  WorkerWatch& operator=(const WorkerWatch&) = delete;

  // `worker` now holds `segment` (after the ones it already holds); `label` says what it is,
  // e.g. `document "d7", 400 tokens, key 3f2a…`.
  void assign(int worker, int64_t segment, const std::string& label);
  // The entry of `segment` from `worker` has arrived.
  void received(int worker, int64_t segment);
  // Throws WorkerDied when a worker that holds work is gone (checked at most every 10 ms: on
  // this node by its PID, on another by its lifeline; a worker seen gone is given 100 ms for
  // its last entry to arrive) or its lifeline timed out (its node or link is down).
  void check();
  // Segments `worker` holds, in the order it computes them.
  std::vector<int64_t> holding(int worker) const;
  // Whether `worker`'s announcement has arrived, and whether it runs on this node.
  bool known(int worker) const;
  bool local(int worker) const;
  // The state of `worker`'s lifeline (kUnavailable for a local worker: it has none).
  LifelineState lifeline(int worker) const;

 private:
  void receive_announcements();
  void publish(int worker);
  // "worker rank R (pid P on HOST) <verb> while computing segment S (…); N more …; <suffix>"
  std::string describe(int worker, const std::string& verb) const;

  MPI_Comm comm_;
  int workers_ = 0;
  std::unique_ptr<detail::WatchShared> shared_;
  std::vector<ProcessIdentity> ids_;
  std::vector<std::vector<uint8_t>> hello_buffers_;
  std::vector<MPI_Request> hello_requests_;
  std::vector<std::deque<std::pair<int64_t, std::string>>> held_;
  std::vector<double> gone_since_;
  std::vector<std::unique_ptr<Lifeline>> lifelines_;
  std::vector<bool> lifeline_warned_;
  bool all_remote_ = false;
  double last_check_s_ = 0;
};

}  // namespace hypic::cluster
