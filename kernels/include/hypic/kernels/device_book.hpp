#pragma once
// Host-side bookkeeping of the CUDA backend (kernels/cuda), kept apart from every CUDA header
// so that the unit tests run it on any machine (tests/unit/device_book_test.cpp):
//  - UploadBook: which uploads in flight write into which device block, so that a
//    stream-ordered free waits for those uploads only (cuda_backend.cu);
//  - TicketEvents: the events behind the NCCL link's tickets, recycled once complete whether
//    or not anyone asks done() (nccl_link.cu);
//  - the HYPIC_CUDA_SYNC_DEBUG setting and the text of a CUDA fault (check.cuh).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hypic::kernels::device_book {

// Device blocks and the uploads (tickets, increasing) that write into them. A block freed
// while an upload into it is in flight must not be reused before that upload ends; released()
// names the newest such upload (0: none) so that the free can be ordered after it, without
// waiting for the uploads into other blocks.
class UploadBook {
 public:
  void allocated(const void* p, size_t bytes) { blocks_[addr(p)] = bytes; }
  void uploaded(const void* dst, size_t bytes, uint64_t ticket) {
    if (bytes > 0 && ticket > fenced_) uploads_.push_back({addr(dst), bytes, ticket});
  }
  // Every upload up to `ticket` is complete.
  void fenced(uint64_t ticket) {
    if (ticket <= fenced_) return;
    fenced_ = ticket;
    uploads_.erase(std::remove_if(uploads_.begin(), uploads_.end(),
                                  [&](const Upload& u) { return u.ticket <= fenced_; }),
                   uploads_.end());
  }
  // Forgets block p; returns the newest upload into it not known complete (0: none).
  uint64_t released(const void* p) {
    const auto it = blocks_.find(addr(p));
    if (it == blocks_.end()) return 0;
    const uintptr_t lo = it->first, hi = it->first + it->second;
    blocks_.erase(it);
    uint64_t newest = 0;
    uploads_.erase(std::remove_if(uploads_.begin(), uploads_.end(),
                                  [&](const Upload& u) {
                                    const bool inside = u.dst < hi && u.dst + u.bytes > lo;
                                    if (inside) newest = std::max(newest, u.ticket);
                                    return inside;
                                  }),
                   uploads_.end());
    return newest;
  }
  size_t blocks() const { return blocks_.size(); }
  size_t uploads_in_flight() const { return uploads_.size(); }

 private:
  static uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  struct Upload {
    uintptr_t dst;
    size_t bytes;
    uint64_t ticket;
  };
  std::map<uintptr_t, size_t> blocks_;  // live blocks: start → bytes
  std::vector<Upload> uploads_;         // not known complete
  uint64_t fenced_ = 0;
};

// Tickets (increasing from 1) backed by events. An event lives from issue() until it is seen
// complete, by done() or by reap() (which the owner calls at every new transfer), and then goes
// back to a free list for a later ticket; a ticket no longer held is complete. So a ticket
// nobody polls (a receive whose completion only the compute stream waits for) costs no event
// for longer than the transfer runs. Ops: `Handle create()`, `bool ready(Handle)` (throws on
// a failed transfer), `void destroy(Handle) noexcept`.
template <class Ops>
class TicketEvents {
 public:
  using Handle = decltype(std::declval<Ops&>().create());
  static constexpr size_t kKeepFree = 32;  // free events kept for reuse; more are destroyed

  explicit TicketEvents(Ops ops) : ops_(std::move(ops)) {}
  ~TicketEvents() {
    for (auto& [ticket, h] : live_) ops_.destroy(h);
    for (Handle h : free_) ops_.destroy(h);
  }
  TicketEvents(const TicketEvents&) = delete;
  TicketEvents& operator=(const TicketEvents&) = delete;

  // A new ticket and the event to record for it.
  std::pair<uint64_t, Handle> issue() {
    Handle h;
    if (!free_.empty()) {
      h = free_.back();
      free_.pop_back();
    } else {
      h = ops_.create();
    }
    live_.emplace(++tickets_, h);
    return {tickets_, h};
  }
  // The event of a ticket still in flight, or null once it is known complete.
  const Handle* find(uint64_t ticket) const {
    const auto it = live_.find(ticket);
    return it == live_.end() ? nullptr : &it->second;
  }
  bool done(uint64_t ticket) {
    const auto it = live_.find(ticket);
    if (it == live_.end()) return true;
    if (!ops_.ready(it->second)) return false;
    recycle(it);
    return true;
  }
  // Recycles the event of every ticket that has completed.
  void reap() {
    for (auto it = live_.begin(); it != live_.end();) {
      if (ops_.ready(it->second))
        it = recycle(it);
      else
        ++it;
    }
  }
  size_t in_flight() const { return live_.size(); }
  size_t free_events() const { return free_.size(); }

 private:
  typename std::map<uint64_t, Handle>::iterator recycle(
      typename std::map<uint64_t, Handle>::iterator it) {
    if (free_.size() < kKeepFree)
      free_.push_back(it->second);
    else
      ops_.destroy(it->second);
    return live_.erase(it);
  }
  Ops ops_;
  std::map<uint64_t, Handle> live_;  // tickets in flight
  std::vector<Handle> free_;
  uint64_t tickets_ = 0;
};

// HYPIC_CUDA_SYNC_DEBUG: unset, empty or "0" off, "1" on; anything else is an error naming the
// variable (a typo must not silently leave the check off).
inline bool sync_debug_setting(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "0") return false;
  if (v == "1") return true;
  throw std::invalid_argument("HYPIC_CUDA_SYNC_DEBUG must be 0 or 1, not '" + v + "'");
}

// HYPIC_CUDA_GEMM: "bf16" (or unset/empty: the default) runs the products of the CUDA backend
// on tensor cores (activations rounded to bf16, weights in bf16, f32 accumulation); "f32" keeps
// them exact (f32 sgemm; bf16 weights times activations split into three bf16 terms), for
// device-vs-host checks at f32 tolerances. Returns whether tensor cores are on.
inline bool gemm_tensor_cores_setting(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "bf16") return true;
  if (v == "f32") return false;
  throw std::invalid_argument("HYPIC_CUDA_GEMM must be bf16 or f32, not '" + v + "'");
}

// A grouped row-major product y_e = x_e · W_eᵀ (Backend::grouped_linear) as the column-major
// problems cuBLAS's grouped GEMM takes: per non-empty group e, C_e (n × rows_e, ld n) =
// W_e(k × n, ld k)ᵀ · X_e (k × rows_e, ld k), i.e. transa = T, transb = N, m = n, n = rows_e.
// Pointers are byte addresses: x holds rows of k elements of x_bytes each, y rows of n floats.
struct GroupedGemmPlan {
  std::vector<int> m, n, k;       // per problem (one group of one problem each)
  std::vector<const void*> a, b;  // a: W_e, b: X_e
  std::vector<void*> c;           // c: Y_e
  int problems() const { return static_cast<int>(m.size()); }
};
inline GroupedGemmPlan grouped_linear_plan(const void* x, size_t x_bytes, const void* const* w,
                                           const int* start, int groups, float* y, int n, int k) {
  GroupedGemmPlan p;
  for (int e = 0; e < groups; ++e) {
    const int rows = start[e + 1] - start[e];
    if (rows < 0) throw std::invalid_argument("grouped_linear: group starts must ascend");
    if (rows == 0) continue;
    if (w[e] == nullptr)
      throw std::invalid_argument("grouped_linear: a non-empty group without a weight");
    p.m.push_back(n);
    p.n.push_back(rows);
    p.k.push_back(k);
    p.a.push_back(w[e]);
    p.b.push_back(static_cast<const char*>(x) + static_cast<size_t>(start[e]) * k * x_bytes);
    p.c.push_back(y + static_cast<size_t>(start[e]) * n);
  }
  return p;
}

// The one line a CUDA failure is reported with. `what` names the call or kernel; `launch`:
// the kernel failed to start (bad configuration), else it or earlier work failed while
// running; `sticky`: the error left the CUDA context unusable, so every later call fails too.
inline std::string fault_message(const std::string& what, const std::string& error, bool sticky,
                                 bool sync_debug) {
  std::string s = what + ": " + error;
  if (sticky) {
    s += " (sticky CUDA error: the device context is lost, every later CUDA call fails; stop";
    if (!sync_debug)
      s += "; the fault may come from a kernel queued before this call: rerun with "
           "HYPIC_CUDA_SYNC_DEBUG=1 to name it";
    s += ")";
  }
  return s;
}

}  // namespace hypic::kernels::device_book
