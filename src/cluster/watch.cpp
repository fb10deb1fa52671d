#include "cluster/watch.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cluster/messages.hpp"
#include "cluster/world.hpp"

namespace hypic::cluster {
namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
constexpr size_t kHelloBytes = 1024;
constexpr size_t kLineBytes = 2048;    // one death message (its part after the verb)
constexpr size_t kBriefBytes = 400;    // one worker's part of the SIGTERM summary
constexpr size_t kSuffixBytes = 1024;  // what the caller says after every message

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Copies `text` into `out` (capacity n), cut to fit; a line keeps its final newline.
void copy_cut(char* out, size_t n, const std::string& text, bool newline) {
  const size_t room = n - 1 - (newline ? 1 : 0);
  const size_t len = std::min(text.size(), room);
  std::memcpy(out, text.data(), len);
  size_t at = len;
  if (newline) out[at++] = '\n';
  out[at] = '\0';
}

// ---- async-signal-safe helpers -----------------------------------------------------------

void write_all(const char* s) {
  size_t len = std::strlen(s);
  while (len > 0) {
    const ssize_t n = ::write(STDERR_FILENO, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s += n;
    len -= static_cast<size_t>(n);
  }
}

bool gone_by_kill(int64_t pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH;
}

}  // namespace

// ---- what the signal handler reads -------------------------------------------------------

namespace detail {
struct WatchShared {
  struct Slot {
    std::atomic<int64_t> pid{0};
    std::atomic<bool> local{false};
    std::atomic<int> lifeline_fd{-1};  // a remote worker's lifeline socket, else -1
    std::atomic<int> verdict{0};       // what check() saw on it: 0 nothing, 1 closed, 2 lost
    std::atomic<int> current{0};
    // Two copies: the main thread writes the one not current, then flips `current`. A death
    // message is head + verb ("died", "stopped answering (…)") + tail.
    char head[2][kBriefBytes] = {};   // "hypic: error: worker rank 2 (pid 7 on n3) "
    char tail[2][kLineBytes] = {};    // " while computing segment 7 (…); …\n"; "" if idle
    char brief[2][kBriefBytes] = {};  // "rank 2 on n3 segment 7 (…)"
  };
  explicit WatchShared(int workers) : slots(static_cast<size_t>(workers) + 1) {}

  std::vector<Slot> slots;  // index: worker rank (0 unused)
  char suffix[kSuffixBytes] = {};
  // 0: nothing reported yet; otherwise who reported: a worker's rank (a death), or -1 (the
  // SIGTERM summary). Whoever sets it prints; nobody prints twice.
  std::atomic<int> reported{0};
  std::atomic<bool> handler_printed{false};
  bool installed = false;
  struct sigaction old_cont {};
  struct sigaction old_term {};
  WatchShared* previous = nullptr;
};
}  // namespace detail
using detail::WatchShared;

namespace {
std::atomic<WatchShared*> g_active{nullptr};

constexpr const char* kSilentVerb =
    "stopped answering (its lifeline's TCP keep-alive probes go unanswered: its node or its link "
    "is down)";

// The first worker that holds work and is gone (on this node: its process; on another: its
// lifeline closed, or silent), else 0; `*silent` says which kind of loss.
int find_dead(WatchShared& s, bool* silent) {
  for (size_t w = 1; w < s.slots.size(); ++w) {
    auto& slot = s.slots[w];
    *silent = false;
    if (slot.tail[slot.current.load()][0] == '\0') continue;
    if (slot.local.load()) {
      if (gone_by_kill(slot.pid.load())) return static_cast<int>(w);
      continue;
    }
    const int verdict = slot.verdict.load();
    const int fd = slot.lifeline_fd.load();
    if (verdict == 1 || (verdict == 0 && lifeline_broken(fd))) return static_cast<int>(w);
    if (verdict == 2 || lifeline_silent(fd)) {
      *silent = true;
      return static_cast<int>(w);
    }
  }
  return 0;
}

void on_signal(int sig) {
  const int saved_errno = errno;
  WatchShared* s = g_active.load();
  if (s != nullptr) {
    bool silent = false;
    const int dead = find_dead(*s, &silent);
    int expected = 0;
    if (dead > 0 && s->reported.compare_exchange_strong(expected, dead)) {
      auto& slot = s->slots[static_cast<size_t>(dead)];
      const int cur = slot.current.load();
      write_all(slot.head[cur]);
      write_all(silent ? kSilentVerb : "died");
      write_all(slot.tail[cur]);
      s->handler_printed.store(true);
    } else if (dead == 0 && sig == SIGTERM && s->reported.compare_exchange_strong(expected, -1)) {
      write_all(
          "hypic: error: rank 0 got SIGTERM (a launcher sends it when a rank dies or the job is "
          "cancelled)");
      bool any = false;
      for (size_t w = 1; w < s->slots.size(); ++w) {
        auto& slot = s->slots[w];
        const char* brief = slot.brief[slot.current.load()];
        if (brief[0] == '\0') continue;
        write_all(any ? "; " : "; the workers held: ");
        write_all(brief);
        any = true;
      }
      if (!any) write_all("; no worker held a segment");
      write_all("; ");
      write_all(s->suffix);
      write_all("\n");
    }
    if (sig == SIGTERM) {
      // Let SIGTERM do what it did before: restore the old action, deliver it on return.
      sigaction(SIGTERM, &s->old_term, nullptr);
      raise(SIGTERM);
    } else if (s->old_cont.sa_handler != SIG_DFL && s->old_cont.sa_handler != SIG_IGN &&
               !(s->old_cont.sa_flags & SA_SIGINFO)) {
      s->old_cont.sa_handler(sig);
    }
  }
  errno = saved_errno;
}

std::string pid_namespace() {
  char buf[128];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  template <class T>
  T get() {
    HYPIC_REQUIRE(at_ + sizeof(T) <= n_, "worker announcement: truncated message");
    T v;
    std::memcpy(&v, d_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    const uint32_t len = get<uint32_t>();
    HYPIC_REQUIRE(at_ + len <= n_, "worker announcement: truncated message");
    std::string s(reinterpret_cast<const char*>(d_ + at_), len);
    at_ += len;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t at_ = 0;
};

}  // namespace

ProcessIdentity this_process(MPI_Comm comm) {
  ProcessIdentity id;
  MPI_Comm_rank(comm, &id.rank);
  id.pid = static_cast<int64_t>(::getpid());
  char host[HOST_NAME_MAX + 1] = {};
  ::gethostname(host, sizeof host - 1);
  id.host = host;
  id.pid_namespace = pid_namespace();
  return id;
}

std::vector<uint8_t> serialize_identity(const ProcessIdentity& id) {
  const std::string host = id.host.substr(0, 255), ns = id.pid_namespace.substr(0, 255);
  std::vector<uint8_t> out(4 + 4 + 8 + 4 + host.size() + 4 + ns.size());
  size_t at = 0;
  auto put = [&](const void* p, size_t n) {
    if (n > 0) std::memcpy(out.data() + at, p, n);
    at += n;
  };
  auto put_string = [&](const std::string& s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    put(&n, sizeof n);
    put(s.data(), n);
  };
  put(&kHelloMagic, sizeof kHelloMagic);
  const int32_t rank = id.rank;
  put(&rank, sizeof rank);
  put(&id.pid, sizeof id.pid);
  put_string(host);
  put_string(ns);
  out.resize(out.size() + sizeof id.lifeline_port);
  put(&id.lifeline_port, sizeof id.lifeline_port);
  return out;
}

ProcessIdentity deserialize_identity(const uint8_t* data, size_t size) {
  Reader r(data, size);
  HYPIC_REQUIRE(r.get<uint32_t>() == kHelloMagic, "worker announcement: not a hypic message");
  ProcessIdentity id;
  id.rank = r.get<int32_t>();
  id.pid = r.get<int64_t>();
  id.host = r.get_string();
  id.pid_namespace = r.get_string();
  id.lifeline_port = r.get<uint16_t>();
  return id;
}

void announce_worker(MPI_Comm comm, int driver_rank) {
  ProcessIdentity me = this_process(comm);
  me.lifeline_port = lifeline_port();
  const std::vector<uint8_t> bytes = serialize_identity(me);
  check_mpi(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, driver_rank, kTagHello,
                     comm),
            "MPI_Send(worker announcement)");
}

bool process_gone(int64_t pid) {
  if (pid <= 0) return false;
  if (gone_by_kill(pid)) return true;
  // A zombie still answers kill(): it has died but its parent has not collected it yet.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'Z' || state == 'X';
}

// ---- WorkerWatch -------------------------------------------------------------------------

WorkerWatch::WorkerWatch(MPI_Comm comm, std::string after_death, bool install_handlers,
                         bool all_remote)
    : comm_(comm), all_remote_(all_remote) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  workers_ = size - 1;
  shared_ = std::make_unique<WatchShared>(workers_);
  copy_cut(shared_->suffix, kSuffixBytes, after_death, false);
  ids_.resize(static_cast<size_t>(size));
  held_.resize(static_cast<size_t>(size));
  gone_since_.assign(static_cast<size_t>(size), 0.0);
  lifelines_.resize(static_cast<size_t>(size));
  lifeline_warned_.assign(static_cast<size_t>(size), false);
  hello_buffers_.assign(static_cast<size_t>(size), std::vector<uint8_t>(kHelloBytes));
  hello_requests_.assign(static_cast<size_t>(size), MPI_REQUEST_NULL);
  for (int w = 1; w <= workers_; ++w) {
    auto& buf = hello_buffers_[static_cast<size_t>(w)];
    check_mpi(MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, w, kTagHello, comm,
                        &hello_requests_[static_cast<size_t>(w)]),
              "MPI_Irecv(worker announcement)");
  }
  shared_->previous = g_active.exchange(shared_.get());
  if (install_handlers) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCONT, &sa, &shared_->old_cont);
    sigaction(SIGTERM, &sa, &shared_->old_term);
    shared_->installed = true;
  }
}

WorkerWatch::~WorkerWatch() {
  if (shared_->installed) {
    sigaction(SIGCONT, &shared_->old_cont, nullptr);
    sigaction(SIGTERM, &shared_->old_term, nullptr);
  }
  g_active.store(shared_->previous);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  for (MPI_Request& r : hello_requests_) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);  // a cancelled receive completes locally
  }
}

void WorkerWatch::receive_announcements() {
  for (int w = 1; w <= workers_; ++w) {
    MPI_Request& r = hello_requests_[static_cast<size_t>(w)];
    if (r == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&r, &done, &status), "MPI_Test(worker announcement)");
    if (!done) continue;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    ProcessIdentity id = deserialize_identity(hello_buffers_[static_cast<size_t>(w)].data(),
                                              static_cast<size_t>(count));
    const ProcessIdentity me = this_process(comm_);
    auto& slot = shared_->slots[static_cast<size_t>(w)];
    slot.pid.store(id.pid);
    const bool local = !all_remote_ && id.host == me.host && !id.pid_namespace.empty() &&
                       id.pid_namespace == me.pid_namespace;
    slot.local.store(local);
    if (!local)  // another node: its PID means nothing here, its lifeline does
      lifelines_[static_cast<size_t>(w)] = std::make_unique<Lifeline>(id.host, id.lifeline_port);
    ids_[static_cast<size_t>(w)] = std::move(id);
    publish(w);
  }
}

bool WorkerWatch::known(int worker) const {
  return ids_.at(static_cast<size_t>(worker)).pid > 0;
}

bool WorkerWatch::local(int worker) const {
  return shared_->slots.at(static_cast<size_t>(worker)).local.load();
}

LifelineState WorkerWatch::lifeline(int worker) const {
  const auto& l = lifelines_.at(static_cast<size_t>(worker));
  return l ? l->state() : LifelineState::kUnavailable;
}

std::string WorkerWatch::describe(int worker, const std::string& verb) const {
  const auto& held = held_[static_cast<size_t>(worker)];
  const ProcessIdentity& id = ids_[static_cast<size_t>(worker)];
  const std::string where =
      id.pid > 0 ? "pid " + std::to_string(id.pid) + " on " + id.host : "pid not yet known";
  const std::string segment = held.empty() ? std::string("nothing")
                                           : "segment " + std::to_string(held.front().first) +
                                                 " (" + held.front().second + ")";
  const std::string more = held.size() > 1 ? "; " + std::to_string(held.size() - 1) +
                                                 " more segment(s) were queued on it"
                                           : "";
  return "worker rank " + std::to_string(worker) + " (" + where + ") " + verb +
         " while computing " + segment + more + "; " + shared_->suffix;
}

void WorkerWatch::publish(int worker) {
  auto& slot = shared_->slots[static_cast<size_t>(worker)];
  const auto& held = held_[static_cast<size_t>(worker)];
  const int next = 1 - slot.current.load();
  if (held.empty()) {
    slot.head[next][0] = '\0';
    slot.tail[next][0] = '\0';
    slot.brief[next][0] = '\0';
  } else {
    const ProcessIdentity& id = ids_[static_cast<size_t>(worker)];
    const std::string segment =
        "segment " + std::to_string(held.front().first) + " (" + held.front().second + ")";
    const std::string line = describe(worker, "\x01");  // the verb's place
    const size_t at = line.find('\x01');
    copy_cut(slot.head[next], kBriefBytes, "hypic: error: " + line.substr(0, at), false);
    copy_cut(slot.tail[next], kLineBytes, line.substr(at + 1), true);
    copy_cut(slot.brief[next], kBriefBytes,
             "rank " + std::to_string(worker) + (id.host.empty() ? "" : " on " + id.host) + " " +
                 segment +
                 (held.size() > 1 ? " and " + std::to_string(held.size() - 1) + " queued" : ""),
             false);
  }
  slot.current.store(next);
}

void WorkerWatch::assign(int worker, int64_t segment, const std::string& label) {
  HYPIC_REQUIRE(worker >= 1 && worker <= workers_,
                "worker watch: no worker rank " + std::to_string(worker));
  held_[static_cast<size_t>(worker)].emplace_back(segment, label);
  publish(worker);
}

void WorkerWatch::received(int worker, int64_t segment) {
  if (worker < 1 || worker > workers_) return;
  auto& held = held_[static_cast<size_t>(worker)];
  const auto it =
      std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.first == segment; });
  if (it == held.end()) return;
  held.erase(it);
  publish(worker);
}

std::vector<int64_t> WorkerWatch::holding(int worker) const {
  std::vector<int64_t> out;
  for (const auto& h : held_.at(static_cast<size_t>(worker))) out.push_back(h.first);
  return out;
}

void WorkerWatch::check() {
  auto died = [&](int w, bool printed) {
    const auto& held = held_[static_cast<size_t>(w)];
    throw WorkerDied(w, held.empty() ? -1 : held.front().first, describe(w, "died"), printed);
  };
  if (shared_->handler_printed.load()) died(shared_->reported.load(), true);
  const double t = now_s();
  if (t - last_check_s_ < 0.010) return;
  last_check_s_ = t;
  receive_announcements();
  for (int w = 1; w <= workers_; ++w) {
    double& since = gone_since_[static_cast<size_t>(w)];
    if (held_[static_cast<size_t>(w)].empty()) {
      since = 0;
      continue;
    }
    bool gone = false;
    if (local(w)) {
      gone = process_gone(ids_[static_cast<size_t>(w)].pid);
    } else if (Lifeline* line = lifelines_[static_cast<size_t>(w)].get()) {
      const LifelineState st = line->poll();
      auto& slot = shared_->slots[static_cast<size_t>(w)];
      // The handler keeps seeing the socket, and what was seen on it: a reset is reported by
      // recv() once, and SIGTERM may come within the grace below.
      slot.lifeline_fd.store(line->fd());
      slot.verdict.store(st == LifelineState::kClosed ? 1 : st == LifelineState::kLost ? 2 : 0);
      if (st == LifelineState::kUnavailable && !lifeline_warned_[static_cast<size_t>(w)]) {
        lifeline_warned_[static_cast<size_t>(w)] = true;
        std::fprintf(stderr,
                     "hypic: warning: worker rank %d on %s has no lifeline (%s); its death or "
                     "the loss of its node is seen only when the launcher ends the job\n",
                     w, ids_[static_cast<size_t>(w)].host.c_str(), line->problem().c_str());
      }
      if (st == LifelineState::kLost) {
        int expected = 0;
        if (shared_->reported.compare_exchange_strong(expected, w)) {
          const auto& held = held_[static_cast<size_t>(w)];
          throw WorkerDied(w, held.front().first,
                           describe(w, "stopped answering: its lifeline to " + line->problem() +
                                           " (no answer to TCP keep-alive for " +
                                           std::to_string(KeepAlive{}.bound_s()) +
                                           " s: its node or its link is down)"),
                           false);
        }
        if (shared_->handler_printed.load()) died(shared_->reported.load(), true);
      }
      gone = st == LifelineState::kClosed;
    }
    if (!gone) {
      since = 0;
      continue;
    }
    if (since == 0) since = t;
    if (t - since < 0.100) continue;  // its last entry may still be on the way
    int expected = 0;
    if (shared_->reported.compare_exchange_strong(expected, w)) died(w, false);
    if (shared_->handler_printed.load()) died(shared_->reported.load(), true);
  }
}

}  // namespace hypic::cluster
