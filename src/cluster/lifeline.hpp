#pragma once
// A worker's lifeline (docs/cluster.md, "A worker on another node"): rank 0 cannot check the
// PID of a worker on another node, and Open MPI 4.1 reports neither a dead peer nor a lost
// link to the survivors (a receive from a node whose link went down waits forever). So every
// worker keeps a TCP listening socket open for as long as it lives, and announces its port;
// rank 0 connects to it and never sends anything. The kernels do the rest:
//  - the worker process dies (SIGKILL, out of memory): its kernel closes the socket and resets
//    the connection at once, and rank 0 reads ECONNRESET or end of file;
//  - its node or link goes down: TCP keep-alive probes (kernel-level, also while the worker is
//    busy computing) go unanswered, and the connection fails with ETIMEDOUT after about
//    idle + interval x count seconds (7 s with the defaults).
// The worker never accepts the connection (the kernel completes it in the listen queue), so the
// lifeline costs the worker no thread and no call after the first.
#include <cstdint>
#include <string>

namespace hypic::cluster {

struct KeepAlive {
  int idle_s = 2;      // TCP_KEEPIDLE: silence before the first probe
  int interval_s = 1;  // TCP_KEEPINTVL: between probes
  int count = 5;       // TCP_KEEPCNT: unanswered probes before the connection fails
  int bound_s() const { return idle_s + interval_s * count; }
};

// Worker side: the port of this process's lifeline listener (IPv4, every address), created on
// the first call and kept open until the process ends; 0 when no socket could be made (the
// worker is then watched only by its launcher, as before).
uint16_t lifeline_port();
// Closes this process's listener (the next lifeline_port() opens a new one): for tests, which
// stand in for a worker's death this way.
void close_lifeline_listener();

enum class LifelineState {
  kConnecting,   // connect() in progress
  kAlive,        // connected, nothing wrong seen
  kClosed,       // the peer closed or reset it, or refused the connection: its process is gone
  kLost,         // no answer (keep-alive or connect timed out, host unreachable): node or link
  kUnavailable,  // no lifeline could be started (host name not resolved, no socket)
};
const char* lifeline_state_name(LifelineState s);

// Rank 0 side: one connection to a worker's lifeline.
class Lifeline {
 public:
  // Starts a non-blocking connection to `host`:`port` (the first IPv4 address the resolver
  // gives for `host`), with the keep-alive settings `ka`. Never throws: a failure to start
  // leaves the state kUnavailable with problem() saying why.
  Lifeline(const std::string& host, uint16_t port, KeepAlive ka = {});
  ~Lifeline();
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

  // Looks at the connection without blocking and returns the new state (kClosed, kLost and
  // kUnavailable are final).
  LifelineState poll();
  LifelineState state() const { return state_; }
  // What went wrong, e.g. "10.231.0.13:40713: Connection timed out"; "" while alive.
  const std::string& problem() const { return problem_; }
  // The socket (-1 when there is none), for lifeline_broken() in a signal handler.
  int fd() const { return fd_; }
  const std::string& where() const { return where_; }

 private:
  int fd_ = -1;
  LifelineState state_ = LifelineState::kUnavailable;
  std::string where_;
  std::string problem_;
};

// Async-signal-safe (recv and errno only): true when the connected socket `fd` was closed or
// reset by its peer, or failed (keep-alive timeout). False while it is fine, and for fd < 0.
bool lifeline_broken(int fd);
// Async-signal-safe (getsockopt TCP_INFO): true when at least two keep-alive probes on `fd` are
// unanswered, i.e. the peer's host has not answered for a probe interval past the first probe
// (a healthy peer answers each probe within a round trip). This names a lost node in the
// SIGTERM that a launcher sends when it noticed the loss first.
bool lifeline_silent(int fd);

}  // namespace hypic::cluster
