// Entry, command and failure traffic between real ranks. Runs at 1, 2 and 3 ranks: rank 0 is
// the driver, ranks 1.. the workers; with one rank, rank 0 plays both and sends to itself,
// which runs the same code paths (non-blocking self-sends through MPI).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/lpt.hpp"
#include "cluster/messages.hpp"
#include "cluster/watch.hpp"
#include "cluster/world.hpp"
#include "store/entry.hpp"

namespace hypic::cluster {
namespace {

constexpr int kDriver = 0;

struct Roles {
  Communicator comm;  // a private duplicate: nothing from another test can match
  int rank = 0;
  int size = 1;
  bool driver = false;
  bool worker = false;
  std::vector<int> workers;  // with one rank: {0}
};

Roles roles() {
  Roles r;
  r.comm = Communicator::world().duplicate();
  r.rank = r.comm.rank();
  r.size = r.comm.size();
  r.driver = r.rank == kDriver;
  r.worker = r.size == 1 || r.rank != kDriver;
  for (int w = (r.size == 1 ? 0 : 1); w < r.size; ++w) r.workers.push_back(w);
  return r;
}

// A deterministic entry for a segment: 1-4 arrays of rank 1-3 whose values are random bit
// patterns (NaNs with payloads, subnormals, -0 included); every 5th is large enough
// (about 300 KB) to travel by MPI's rendezvous protocol, in several chunks.
store::Entry make_entry(int64_t segment) {
  std::mt19937 rng(static_cast<uint32_t>(segment * 7919 + 17));
  store::Entry e;
  e.n_tokens = 1 + static_cast<int64_t>(rng() % 5000);
  const int n_arrays = 1 + static_cast<int>(rng() % 4);
  for (int a = 0; a < n_arrays; ++a) {
    const int rank = 1 + static_cast<int>(rng() % 3);
    std::vector<int64_t> shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 12));
    if (segment % 5 == 0 && a == 0) shape = {75000};
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const uint32_t bits = rng();
      std::memcpy(&t[i], &bits, sizeof(bits));
    }
    e.arrays["linear/" + std::to_string(a) + "/T"] = std::move(t);
  }
  return e;
}

std::string key_of(int64_t segment) {
  return "key-" + std::to_string(segment);
}

bool bit_equal(const store::Entry& a, const store::Entry& b) {
  if (a.n_tokens != b.n_tokens || a.arrays.size() != b.arrays.size()) return false;
  for (const auto& [name, t] : a.arrays) {
    const auto it = b.arrays.find(name);
    if (it == b.arrays.end() || it->second.shape() != t.shape()) return false;
    if (std::memcmp(it->second.data(), t.data(), t.bytes()) != 0) return false;
  }
  return true;
}

// Polls until `count` entries have arrived, or fails the test after a deadline instead of
// hanging the whole job.
std::vector<ReceivedEntry> collect(EntryReceiver& receiver, size_t count) {
  std::vector<ReceivedEntry> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.size() < count) {
    for (ReceivedEntry& r : receiver.poll()) got.push_back(std::move(r));
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "only " << got.size() << " of " << count << " entries arrived";
      break;
    }
    if (got.size() < count) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return got;
}

TEST(ClusterMessages, EntriesRoundTripBetweenDriverAndEachWorkerBitExact) {
  Roles r = roles();
  constexpr int kPerWorker = 3;
  EntryReceiver receiver(r.comm.get());
  std::map<int, std::unique_ptr<EntrySender>> to_worker;
  if (r.driver) {
    for (int w : r.workers) {
      to_worker[w] = std::make_unique<EntrySender>(r.comm.get(), w, 50000);
      for (int k = 0; k < kPerWorker; ++k) {
        const int64_t segment = 100 * w + 5 * k;  // k = 0: the large entry
        to_worker[w]->send(segment, key_of(segment), make_entry(segment));
      }
    }
  }
  EntrySender to_driver(r.comm.get(), kDriver, 50000);
  if (r.worker) {
    // Echo what the driver sent, as it was received.
    for (ReceivedEntry& e : collect(receiver, kPerWorker)) {
      EXPECT_EQ(e.source, kDriver);
      to_driver.send(e.segment, e.key, e.entry);
    }
  }
  if (r.driver) {
    std::vector<ReceivedEntry> echoes = collect(receiver, kPerWorker * r.workers.size());
    std::map<int, int> per_source;
    for (const ReceivedEntry& e : echoes) {
      ++per_source[e.source];
      EXPECT_EQ(e.segment / 100, e.source) << "segment " << e.segment;
      EXPECT_EQ(e.key, key_of(e.segment));
      EXPECT_TRUE(bit_equal(e.entry, make_entry(e.segment))) << "segment " << e.segment;
    }
    for (int w : r.workers) EXPECT_EQ(per_source[w], kPerWorker) << "worker " << w;
    for (auto& [w, sender] : to_worker) sender->wait_all();
  }
  to_driver.wait_all();
  EXPECT_EQ(receiver.in_flight(), 0u);
  MPI_Barrier(r.comm.get());
}

TEST(ClusterMessages, ManyEntriesInFlightAreAllDelivered) {
  Roles r = roles();
  constexpr int kPerWorker = 40;
  EntryReceiver receiver(r.comm.get());
  // Small odd chunks: big entries travel as many messages, all posted before any completes.
  EntrySender sender(r.comm.get(), kDriver, 10007);
  if (r.worker) {
    for (int k = 0; k < kPerWorker; ++k) {
      const int64_t segment = 1000 * r.rank + k;
      sender.send(segment, key_of(segment), make_entry(segment));
    }
    if (!r.driver) sender.wait_all();  // the driver is a separate process: safe to block
  }
  if (r.driver) {
    std::vector<ReceivedEntry> got;
    const size_t expected = kPerWorker * r.workers.size();
    while (got.size() < expected) {
      for (ReceivedEntry& e : receiver.wait_some()) got.push_back(std::move(e));
    }
    EXPECT_EQ(got.size(), expected);
    std::set<int64_t> segments;
    std::map<int, std::vector<int64_t>> order_by_source;
    for (const ReceivedEntry& e : got) {
      EXPECT_TRUE(segments.insert(e.segment).second) << "segment " << e.segment << " twice";
      EXPECT_EQ(e.segment / 1000, e.source);
      EXPECT_TRUE(bit_equal(e.entry, make_entry(e.segment))) << "segment " << e.segment;
      order_by_source[e.source].push_back(e.segment);
    }
    // From one sender, entries complete in the order sent (MPI's non-overtaking rule).
    for (auto& [source, order] : order_by_source) {
      EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "from rank " << source;
    }
    sender.wait_all();
  }
  MPI_Barrier(r.comm.get());
}

TEST(ClusterMessages, OutOfOrderArrivalIsReleasedInPromptOrder) {
  Roles r = roles();
  constexpr int kSegments = 13;
  std::vector<std::vector<int32_t>> tokens(kSegments);
  std::vector<double> costs;
  for (int s = 0; s < kSegments; ++s) {
    for (int t = 0; t < 10 + 7 * ((s * 5) % kSegments); ++t) tokens[s].push_back(s * 1000 + t);
    costs.push_back(static_cast<double>(tokens[s].size()));
  }
  auto key = [&](int s) { return store::entry_key("test-model", tokens[s], 8); };

  EntryReceiver receiver(r.comm.get());
  CommandSender commands(r.comm.get());
  if (r.driver) {
    const Schedule plan = schedule_lpt(costs, static_cast<int>(r.workers.size()));
    for (size_t w = 0; w < r.workers.size(); ++w) {
      for (int64_t s : plan.tasks[w]) {
        commands.send(r.workers[w], Task{s, key(static_cast<int>(s)), tokens[s]});
      }
      commands.send(r.workers[w], Shutdown{});
    }
  }
  std::vector<std::unique_ptr<EntrySender>> senders;
  if (r.worker) {
    std::vector<Task> tasks;
    while (true) {
      Command c = receive_command(r.comm.get(), kDriver);
      if (std::holds_alternative<Shutdown>(c)) break;
      tasks.push_back(std::get<Task>(std::move(c)));
    }
    EXPECT_FALSE(tasks.empty());
    senders.push_back(std::make_unique<EntrySender>(r.comm.get(), kDriver));
    for (auto it = tasks.rbegin(); it != tasks.rend(); ++it) {    // last assigned first
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "compute"
      EXPECT_EQ(it->key, key(static_cast<int>(it->segment)));
      store::Entry e = make_entry(it->segment);
      e.n_tokens = static_cast<int64_t>(it->tokens.size());
      senders.back()->send(it->segment, it->key, e);
      senders.back()->test();
    }
    if (!r.driver) senders.back()->wait_all();
  }
  if (r.driver) {
    std::vector<int64_t> order(kSegments);
    for (int s = 0; s < kSegments; ++s) order[s] = s;
    PromptOrderBuffer buffer(order);
    std::vector<int64_t> arrivals;
    std::vector<int64_t> released;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!buffer.done() && std::chrono::steady_clock::now() < deadline) {
      for (ReceivedEntry& e : receiver.poll()) {
        arrivals.push_back(e.segment);
        buffer.put(std::move(e));
      }
      while (buffer.next_ready()) {
        ReceivedEntry e = buffer.pop_next();
        EXPECT_EQ(e.key, key(static_cast<int>(e.segment)));
        EXPECT_EQ(e.entry.n_tokens, static_cast<int64_t>(tokens[e.segment].size()));
        released.push_back(e.segment);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_EQ(released, order);
    EXPECT_FALSE(std::is_sorted(arrivals.begin(), arrivals.end()))
        << "the test meant to deliver out of order";
    commands.wait_all();
    for (auto& s : senders) s->wait_all();
  }
  MPI_Barrier(r.comm.get());
}

TEST(ClusterMessages, WorkerFailureReachesDriverAsErrorNamingRankAndSegment) {
  Roles r = roles();
  const int failing = r.workers.back();
  EntryReceiver receiver(r.comm.get());
  EntrySender sender(r.comm.get(), kDriver);
  if (r.worker) {
    const Task task{r.rank == failing ? 7 : 20 + r.rank, "k" + std::to_string(r.rank), {1, 2}};
    const bool ok = run_or_report(r.comm.get(), kDriver, task, [&] {
      if (r.rank == failing) throw Error("simulated failure in layer 3");
      sender.send(task.segment, task.key, make_entry(task.segment));
    });
    EXPECT_EQ(ok, r.rank != failing);
  }
  if (r.driver) {
    // The other workers' entries still arrive, and the receiver stays usable after a failure.
    const size_t healthy = r.workers.size() - 1;
    size_t entries = 0;
    int failures = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((entries < healthy || failures == 0) && std::chrono::steady_clock::now() < deadline) {
      try {
        entries += receiver.poll().size();
      } catch (const WorkerFailure& e) {
        ++failures;
        const std::string what = e.what();
        EXPECT_EQ(e.report().rank, failing);
        EXPECT_EQ(e.report().segment, 7);
        EXPECT_NE(what.find("rank " + std::to_string(failing) + " failed on segment 7"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("simulated failure in layer 3"), std::string::npos) << what;
        // It is a hypic::Error: the command's edge prints it as one line and exits non-zero.
        EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_EQ(failures, 1);
    EXPECT_EQ(entries, healthy);
  }
  sender.wait_all();
  MPI_Barrier(r.comm.get());
}

// ---- the worker watch (cluster/watch.hpp) ------------------------------------------------

TEST(WorkerWatch, LearnsItsWorkersAndTracksWhatEachHolds) {
  const Communicator comm = Communicator::world().duplicate();
  const int size = comm.size();
  if (size == 1) GTEST_SKIP() << "needs a worker rank (ctest also runs this at 2 and 3 ranks)";
  if (comm.rank() != 0) {
    announce_worker(comm.get(), 0);
    MPI_Barrier(comm.get());
    return;
  }
  WorkerWatch watch(comm.get(), "rerun to resume", /*install_handlers=*/false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto all_known = [&] {
    for (int w = 1; w < size; ++w)
      if (!watch.known(w)) return false;
    return true;
  };
  while (!all_known() && std::chrono::steady_clock::now() < deadline) {
    watch.check();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(all_known());
  for (int w = 1; w < size; ++w) EXPECT_TRUE(watch.local(w)) << "ctest runs every rank here";
  watch.assign(1, 5, "a");
  watch.assign(1, 7, "b");
  EXPECT_EQ(watch.holding(1), (std::vector<int64_t>{5, 7}));
  watch.received(1, 5);
  EXPECT_EQ(watch.holding(1), (std::vector<int64_t>{7}));
  watch.received(1, 99);  // not held: ignored
  EXPECT_EQ(watch.holding(1), (std::vector<int64_t>{7}));
  EXPECT_THROW(watch.assign(size, 1, "no such worker"), Error);
  // Every worker is alive: checking (past the 10 ms cadence and the 100 ms grace) finds nothing.
  for (int i = 0; i < 30; ++i) {
    EXPECT_NO_THROW(watch.check());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  watch.received(1, 7);
  EXPECT_TRUE(watch.holding(1).empty());
  MPI_Barrier(comm.get());
}

// A worker on another node is watched through its lifeline. `all_remote` makes the watch do so
// for the ranks of this node too; worker 1 then closes its lifeline listener, which is what
// its kernel does when it dies, and rank 0 names it with its host and the segments it held.
TEST(WorkerWatch, ARemoteWorkersClosedLifelineNamesItsRankHostAndSegment) {
  const Communicator comm = Communicator::world().duplicate();
  const int size = comm.size();
  if (size == 1) GTEST_SKIP() << "needs a worker rank (ctest also runs this at 2 and 3 ranks)";
  if (comm.rank() != 0) {
    announce_worker(comm.get(), 0);
    MPI_Barrier(comm.get());  // rank 0 holds every lifeline
    if (comm.rank() == 1) close_lifeline_listener();
    MPI_Barrier(comm.get());  // rank 0 has seen it
    return;
  }
  WorkerWatch watch(comm.get(), "rerun to resume", /*install_handlers=*/false,
                    /*all_remote=*/true);
  for (int w = 1; w < size; ++w) {
    watch.assign(w, 10 * w, "document \"d" + std::to_string(w) + "\"");
    watch.assign(w, 10 * w + 1, "document \"e" + std::to_string(w) + "\"");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto all_alive = [&] {
    for (int w = 1; w < size; ++w)
      if (watch.lifeline(w) != LifelineState::kAlive) return false;
    return true;
  };
  while (!all_alive() && std::chrono::steady_clock::now() < deadline) {
    watch.check();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int w = 1; w < size; ++w) {
    EXPECT_FALSE(watch.local(w));
    EXPECT_EQ(watch.lifeline(w), LifelineState::kAlive) << "worker " << w;
  }
  // Alive lifelines: nothing to report (past the 10 ms cadence and the 100 ms grace).
  for (int i = 0; i < 20; ++i) {
    EXPECT_NO_THROW(watch.check());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MPI_Barrier(comm.get());
  std::string what;
  int rank = 0;
  int64_t segment = -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (what.empty() && std::chrono::steady_clock::now() < until) {
    try {
      watch.check();
    } catch (const WorkerDied& e) {
      what = e.what();
      rank = e.rank();
      segment = e.segment();
      EXPECT_FALSE(e.printed());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(segment, 10);
  EXPECT_EQ(watch.lifeline(1), LifelineState::kClosed);
  const ProcessIdentity me = this_process(comm.get());
  EXPECT_NE(what.find("worker rank 1 (pid "), std::string::npos) << what;
  EXPECT_NE(what.find(" on " + me.host + ") died while computing segment 10 (document \"d1\")"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("1 more segment(s) were queued on it; rerun to resume"), std::string::npos)
      << what;
  MPI_Barrier(comm.get());
}

}  // namespace
}  // namespace hypic::cluster
