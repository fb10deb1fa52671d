#include "cluster/distributed.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "cluster/device_entries.hpp"
#include "cluster/dispatch.hpp"
#include "cluster/lpt.hpp"
#include "cluster/progress.hpp"
#include "cluster/watch.hpp"
#include "hypic/error.hpp"
#include "pic/segment_entry.hpp"
#include "store/open.hpp"
#include "store/shards.hpp"

namespace hypic::cluster {
namespace {
using Clock = std::chrono::steady_clock;

// Tasks a worker holds at once: the one it computes and the next, already queued, so it
// never waits for rank 0 between segments.
constexpr int kDispatchDepth = 2;

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

int comm_rank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int comm_size(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

// pic::compute_entry timed, as the store arrays a worker sends (or rank 0 puts).
store::Entry compute_store_entry(model::Model& model, const std::vector<int32_t>& tokens, int w,
                                 double tolerance, DType dtype, double& seconds) {
  const auto t0 = Clock::now();
  pic::SegmentEntry computed = pic::compute_entry(model, tokens, w);
  if (tolerance > 0) pic::choose_entry_forms(computed, tolerance, dtype);
  store::Entry e = pic::to_store_entry(computed);
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return e;
}

// Removes the worker's timing array; returns the seconds it carried (0 when absent).
double take_compute_seconds(store::Entry& entry) {
  const auto it = entry.arrays.find(kComputeSecondsArray);
  if (it == entry.arrays.end()) return 0.0;
  const double s = it->second.empty() ? 0.0 : it->second[0];
  entry.arrays.erase(it);
  return s;
}

// What a worker that dies holding this task is said to have held.
std::string task_label(const std::string& name, const Task& t) {
  return (name.empty() ? "" : name + ", ") + std::to_string(t.tokens.size()) + " tokens, key " +
         t.key;
}

// Sends worker `w` (0-based; rank w + 1) what the dispatcher hands it now, and tells `watch`
// what that worker holds (labels[i] names task i).
void send_tasks(CommandSender& sender, Dispatcher& dispatcher, int w,
                const std::vector<Task>& tasks, WorkerWatch& watch,
                const std::vector<std::string>& labels) {
  for (const int64_t i : dispatcher.refill(w)) {
    const Task& t = tasks[static_cast<size_t>(i)];
    watch.assign(w + 1, t.segment,
                 task_label(labels.empty() ? "" : labels[static_cast<size_t>(i)], t));
    sender.send(w + 1, t);
  }
  sender.test();
}

// Waits for entries without spinning: MPI_Waitany busy-polls in Open MPI, and a spinning
// rank 0 takes a core from a worker when the ranks share the node's cores. Polling every
// 200 µs also progresses the transfers, and adds at most that much latency. Meanwhile the
// watch checks that the workers holding work are alive (throws WorkerDied).
// `idle` (optional) is done in small units instead of sleeping while there is some.
std::vector<ReceivedEntry> wait_entries(EntryReceiver& receiver, WorkerWatch& watch,
                                        const std::function<bool()>* idle = nullptr,
                                        uint64_t* idle_calls = nullptr) {
  bool more_idle_work = idle != nullptr && *idle;
  for (;;) {
    std::vector<ReceivedEntry> got = receiver.poll();
    for (const ReceivedEntry& e : got) watch.received(e.source, e.segment);
    watch.check();
    if (!got.empty()) return got;
    if (more_idle_work) {
      more_idle_work = (*idle)();
      if (idle_calls != nullptr) ++*idle_calls;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// HYPIC_DEBUG_WORKER_DELAY_MS: a worker sleeps this long before each segment (0: unset).
int debug_worker_delay_ms() {
  const char* v = std::getenv("HYPIC_DEBUG_WORKER_DELAY_MS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long ms = std::strtol(v, &end, 10);
  HYPIC_REQUIRE(
      end != v && *end == '\0' && ms >= 0 && ms <= 600000,
      std::string("HYPIC_DEBUG_WORKER_DELAY_MS must be milliseconds in [0, 600000], got '") + v +
          "'");
  return static_cast<int>(ms);
}

// A worker's next command, polled with short sleeps for the same reason: an idle worker
// must not take the core a busy one (or rank 0) needs.
Command next_command(MPI_Comm comm) {
  for (;;) {
    if (std::optional<Command> c = try_receive_command(comm, 0)) return *c;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

void run_worker(MPI_Comm comm, model::Model& model, const pic::JunctionSpec& junction,
                kernels::DeviceLink* link, double entry_tolerance, store::SegmentStore* shard,
                DType entry_dtype, store::SegmentStore* hit_shard) {
  announce_worker(comm, 0);
  const int delay_ms = debug_worker_delay_ms();
  if (delay_ms > 0) {
    std::fprintf(stderr, "hypic: debug: worker rank %d pid %ld, %d ms before each segment\n",
                 comm_rank(comm), static_cast<long>(getpid()), delay_ms);
    std::fflush(stderr);
  }
  EntrySender sender(comm, 0);
  std::unique_ptr<DeviceEntrySender> device_sender;
  if (link != nullptr) device_sender = std::make_unique<DeviceEntrySender>(comm, *link, 0);
  for (;;) {
    Command command = next_command(comm);
    if (std::holds_alternative<Shutdown>(command)) break;
    const Task& task = std::get<Task>(command);
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    run_or_report(comm, 0, task, [&] {
      const int w = task.junction >= 0
                        ? task.junction
                        : junction.tokens_for(static_cast<int64_t>(task.tokens.size()));
      double seconds = 0;
      if (task.read_stored) {  // a hit in the shard this worker reads: its copy, not computed
        HYPIC_REQUIRE(hit_shard != nullptr,
                      "rank 0 asked for a stored entry, but this rank reads no shard");
        store::ReadResult rr = hit_shard->read(task.key);
        if (rr.status == store::EntryStatus::kValid) {
          rr.entry->arrays[kReadFromShardArray] = Tensor({1}, 1.0f);
          sender.send(task.segment, task.key, *rr.entry);
          return;
        }
        // Missing or damaged there: computed as any cold segment (rank 0 puts it in its store).
      }
      if (task.to_device) {  // the NCCL path: the entry never leaves device memory here
        HYPIC_REQUIRE(device_sender != nullptr,
                      "rank 0 asked for an entry through the device link, which this rank lacks");
        const auto t0 = Clock::now();
        pic::SegmentEntry e = pic::compute_resident_entry(model, task.tokens, w);
        link->finish_compute();  // the compute only: earlier entries may still be in transfer
        seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        store::Entry arrays = pic::take_arrays(std::move(e));
        arrays.arrays[kComputeSecondsArray] = Tensor({1}, static_cast<float>(seconds));
        device_sender->send(task.segment, task.key, std::move(arrays));
        return;
      }
      store::Entry e =
          compute_store_entry(model, task.tokens, w, entry_tolerance,
                              shard != nullptr ? shard->dtype() : entry_dtype, seconds);
      if (shard != nullptr) {  // a sharded warm-up: committed here, rank 0 gets a receipt
        const std::string problem = pic::fp8_store_problem(e, shard->dtype());
        HYPIC_REQUIRE(problem.empty(), problem);
        shard->put(task.key, e);
        store::Entry receipt;
        receipt.n_tokens = e.n_tokens;
        receipt.arrays[kStoredInShardArray] = Tensor({1}, 1.0f);
        receipt.arrays[kComputeSecondsArray] = Tensor({1}, static_cast<float>(seconds));
        sender.send(task.segment, task.key, receipt);
        return;
      }
      e.arrays[kComputeSecondsArray] = Tensor({1}, static_cast<float>(seconds));
      sender.send(task.segment, task.key, e);
    });
    sender.test();
    if (device_sender) device_sender->test();
  }
  sender.wait_all();
  if (device_sender) device_sender->wait_all();
}

void shutdown_workers(MPI_Comm comm) {
  const int n = comm_size(comm);
  if (n <= 1) return;
  CommandSender sender(comm);
  for (int w = 1; w < n; ++w) sender.send(w, Shutdown{});
  sender.wait_all();
}

WarmupPlan plan_warmup(const std::vector<std::vector<int32_t>>& docs,
                       const std::string& fingerprint, const pic::JunctionSpec& junction,
                       const std::function<bool(const std::string& key)>& stored,
                       const std::vector<std::string>& names) {
  WarmupPlan plan;
  std::map<std::string, bool> planned;
  for (size_t i = 0; i < docs.size(); ++i) {
    const int w = junction.tokens_for(static_cast<int64_t>(docs[i].size()));
    std::string key = store::entry_key(fingerprint, docs[i], w);
    if (stored(key) || !planned.emplace(key, true).second) continue;
    plan.missing_tokens += static_cast<int64_t>(docs[i].size());
    plan.tasks.push_back({static_cast<int64_t>(i), std::move(key), docs[i], w});
    plan.labels.push_back(i < names.size() ? "document \"" + names[i] + "\"" : "");
  }
  return plan;
}

WarmupResult warmup_across_ranks(MPI_Comm comm, model::Model& model, const std::string& fingerprint,
                                 const std::vector<std::vector<int32_t>>& docs,
                                 store::SegmentStore* store, const WarmupOptions& options) {
  WarmupResult res;
  const bool sharded = options.writers == Writers::kShards && comm_size(comm) > 1;
  if (comm_rank(comm) != 0) {
    if (!sharded) {
      run_worker(comm, model, options.junction, nullptr, options.entry_tolerance, nullptr,
                 options.entry_dtype);
      return res;
    }
    // The store's dtype comes from rank 0 (an existing store keeps its own).
    int dtype = 0;
    MPI_Bcast(&dtype, 1, MPI_INT, 0, comm);
    // On a cluster the line must say which node cannot write (a read-only or full file
    // system there), so a failure to open names this rank and its host.
    std::optional<store::SegmentStore> opened;
    try {
      opened.emplace(store::open_for_writing(store::shard_path(options.store_path, comm_rank(comm)),
                                             fingerprint, options.junction.store_code(),
                                             static_cast<DType>(dtype), options.sync_to_disk));
    } catch (const std::exception& e) {
      const ProcessIdentity me = this_process(comm);
      throw Error("worker rank " + std::to_string(me.rank) + " (pid " + std::to_string(me.pid) +
                  " on " + me.host + ") cannot write its shard: " + e.what() + "; the store " +
                  options.store_path +
                  " and its other shards are untouched; make the shard writable (or move it "
                  "aside: its entries are then recomputed) and rerun");
    }
    store::SegmentStore& shard = *opened;
    HYPIC_REQUIRE(shard.dtype() == static_cast<DType>(dtype),
                  "shard " + shard.path() + " stores " + dtype_name(shard.dtype()) +
                      " but its store " + options.store_path + " stores " +
                      dtype_name(static_cast<DType>(dtype)) + "; move the shard aside and rerun");
    MPI_Barrier(comm);  // every shard open: rank 0 records them
    run_worker(comm, model, options.junction, nullptr, options.entry_tolerance, &shard);
    shard.close();
    MPI_Barrier(comm);  // every shard closed: rank 0 reads them
    return res;
  }
  HYPIC_REQUIRE(store != nullptr && store->writable(), "warm-up needs a writable store on rank 0");
  const auto t0 = Clock::now();
  res.total = docs.size();
  // A shard that cannot be read is moved aside (kept, never deleted) and an empty one takes its
  // place; its entries are then missing, so the plan below recomputes them.
  if (!store->shard_problems().empty()) {
    store::StoreOptions so;
    so.model_fingerprint = store->model_fingerprint();
    so.junction = store->junction();
    so.dtype = store->dtype();
    for (const store::ShardProblem& p : store->shard_problems()) {
      std::error_code ec;
      if (!std::filesystem::exists(p.path, ec)) {
        store::SegmentStore::create(p.path, so).close();
        if (options.note)
          options.note("shard " + p.path + " is missing; its entries are recomputed");
        continue;
      }
      std::string aside = p.path + ".damaged";
      for (int n = 2; std::filesystem::exists(aside, ec); ++n)
        aside = p.path + ".damaged" + std::to_string(n);
      std::filesystem::rename(p.path, aside, ec);
      HYPIC_REQUIRE(!ec, "shard " + p.path + " is damaged (" + p.problem +
                             ") and cannot be moved aside to " + aside + ": " + ec.message());
      store::SegmentStore::create(p.path, so).close();
      res.moved_shards.push_back(aside);
      if (options.note)
        options.note("shard " + p.path + " is damaged (" + p.problem + "); moved to " + aside +
                     ", its entries are recomputed");
    }
    store->reload_shards();
  }

  WarmupPlan route = plan_warmup(
      docs, fingerprint, options.junction,
      [store](const std::string& key) { return store->contains(key); }, options.labels);
  std::vector<Task>& tasks = route.tasks;
  const std::vector<std::string>& labels = route.labels;
  const int64_t missing_tokens = route.missing_tokens;
  res.present = docs.size() - tasks.size();

  Progress progress(static_cast<int64_t>(tasks.size()), missing_tokens, now_s());
  auto report = [&](bool final) {
    const double t = now_s();
    if (!options.progress || !progress.due(t, options.progress_interval_s)) return;
    options.progress(std::to_string(res.present + res.computed) + "/" + std::to_string(res.total) +
                         " entries (" + std::to_string(res.present) + " already stored); " +
                         progress.line(t),
                     final);
  };
  auto put = [&](const std::string& key, store::Entry&& e, int64_t tokens, double seconds) {
    const std::string problem = pic::fp8_store_problem(e, store->dtype());
    HYPIC_REQUIRE(problem.empty(), problem + "; rerun with --dtype " + dtype_name(store->dtype()));
    store->put(key, e);
    ++res.computed;
    res.computed_tokens += tokens;
    res.samples.push_back({tokens, seconds});
    progress.add(1, tokens);
    report(res.computed == tasks.size());
  };

  const int workers = comm_size(comm) - 1;
  if (sharded) {
    // The plan is made: the shards' readers close before their writers open them.
    store->close_shards();
    int dtype = static_cast<int>(store->dtype());
    MPI_Bcast(&dtype, 1, MPI_INT, 0, comm);
    MPI_Barrier(comm);
    std::vector<std::string> shards;
    for (int r = 1; r <= workers; ++r) shards.push_back(store::shard_path(store->path(), r));
    store::add_to_shard_manifest(store->path(), shards);
    res.writers = workers;
  }
  if (workers == 0) {
    for (const Task& t : tasks) {
      const int w = options.junction.tokens_for(static_cast<int64_t>(t.tokens.size()));
      double seconds = 0;
      store::Entry e =
          compute_store_entry(model, t.tokens, w, options.entry_tolerance, store->dtype(), seconds);
      put(t.key, std::move(e), static_cast<int64_t>(t.tokens.size()), seconds);
    }
  } else {
    std::vector<int64_t> lengths;
    lengths.reserve(tasks.size());
    for (const Task& t : tasks) lengths.push_back(static_cast<int64_t>(t.tokens.size()));
    std::vector<double> costs = options.cost.predict(lengths);
    const Schedule plan = schedule_lpt(costs, workers);
    Dispatcher dispatcher(plan, std::move(costs), kDispatchDepth, true);
    WorkerWatch watch(comm, options.after_death);
    EntryReceiver receiver(comm);
    CommandSender sender(comm);
    for (int w = 0; w < workers; ++w) send_tasks(sender, dispatcher, w, tasks, watch, labels);
    // segment (corpus line) -> its task, to check what arrives
    std::map<int64_t, size_t> task_of;
    for (size_t i = 0; i < tasks.size(); ++i) task_of.emplace(tasks[i].segment, i);
    while (res.computed < tasks.size()) {
      for (ReceivedEntry& got : wait_entries(receiver, watch)) {
        const auto it = task_of.find(got.segment);
        HYPIC_REQUIRE(it != task_of.end() && tasks[it->second].key == got.key,
                      "rank " + std::to_string(got.source) + " sent an entry for segment " +
                          std::to_string(got.segment) + " that was not asked for");
        dispatcher.finished(got.source - 1, static_cast<int64_t>(it->second));
        task_of.erase(it);
        send_tasks(sender, dispatcher, got.source - 1, tasks, watch, labels);
        const double seconds = take_compute_seconds(got.entry);
        const int64_t tokens = got.entry.n_tokens;
        const bool receipt = got.entry.arrays.erase(kStoredInShardArray) == 1;
        HYPIC_REQUIRE(receipt == sharded && (!receipt || got.entry.arrays.empty()),
                      "rank " + std::to_string(got.source) + " sent " +
                          (receipt ? "a receipt" : "an entry") + " for segment " +
                          std::to_string(got.segment) + " where " +
                          (sharded ? "a receipt" : "an entry") + " was expected");
        if (receipt) {  // committed in the worker's shard
          ++res.computed;
          res.computed_tokens += tokens;
          res.samples.push_back({tokens, seconds});
          progress.add(1, tokens);
          report(res.computed == tasks.size());
          continue;
        }
        put(got.key, std::move(got.entry), tokens, seconds);
      }
      sender.test();
    }
    for (int w = 1; w <= workers; ++w) sender.send(w, Shutdown{});
    sender.wait_all();
  }
  if (sharded) {
    MPI_Barrier(comm);  // every shard closed by its writer
    store->reload_shards();
  }
  report(true);
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

// ---- serve -------------------------------------------------------------------------------

struct RemoteColdSource::State {
  MPI_Comm comm;
  model::Model& model;
  CostModel cost;
  int workers = 0;
  int use_workers = 0;
  Policy policy = Policy::kLpt;
  bool rebalance = true;
  std::unique_ptr<WorkerWatch> watch;
  std::unique_ptr<EntryReceiver> receiver;
  std::unique_ptr<CommandSender> sender;
  std::string query_label;
  std::function<bool()> idle;
  uint64_t idle_calls = 0;
  std::unique_ptr<PromptOrderBuffer> order;
  std::map<int64_t, pic::ColdSegment> pending;  // index -> the segment, until taken
  // The current query's cold segments as tasks, and how they are handed out.
  std::vector<Task> tasks;
  std::vector<std::string> labels;
  std::map<int64_t, size_t> task_of;  // segment index -> task
  std::unique_ptr<Dispatcher> dispatcher;
  DispatchStats stats;
  pic::LocalColdSource local;           // with one rank: the engine's own way, so results match
  kernels::DeviceLink* link = nullptr;  // the NCCL path: entries arrive in device memory
  // Serve's hit reads: who reads which hit, over rank 0's store; the current query's hits that
  // workers read (segment -> worker); whether the last take() returned one of them.
  HitReadPlan hits;
  const store::SegmentStore* store = nullptr;
  std::map<int64_t, int> reads;
  bool last_stored = false;

  State(MPI_Comm c, model::Model& m, CostModel cm) : comm(c), model(m), cost(cm), local(m) {}
};

RemoteColdSource::RemoteColdSource(MPI_Comm comm, model::Model& model, CostModel cost,
                                   const std::string& after_death, kernels::DeviceLink* link)
    : s_(std::make_unique<State>(comm, model, cost)) {
  s_->workers = comm_size(comm) - 1;
  s_->use_workers = s_->workers;
  if (s_->workers > 0) {
    s_->watch = std::make_unique<WorkerWatch>(comm, after_death);
    s_->receiver = std::make_unique<EntryReceiver>(comm);
    s_->sender = std::make_unique<CommandSender>(comm);
    if (link != nullptr) {
      HYPIC_REQUIRE(model.backend().device() != Device::Host,
                    "entries through a device link need rank 0 to compute on a device");
      s_->link = link;
      const kernels::Backend& be = model.backend();
      s_->receiver->set_device_handler([&be, link](DeviceEntryHeader&& h, int source) {
        return receive_device_arrays(be, *link, std::move(h), source);
      });
    }
  }
}

RemoteColdSource::~RemoteColdSource() = default;

void RemoteColdSource::set_plan(Policy policy, int workers, bool rebalance) {
  HYPIC_REQUIRE(workers >= 1, "cold source: at least one worker");
  s_->policy = policy;
  s_->use_workers = std::min(workers, s_->workers);
  s_->rebalance = rebalance;
}

const DispatchStats& RemoteColdSource::last_query() const {
  return s_->stats;
}

void RemoteColdSource::set_query_label(std::string label) {
  s_->query_label = std::move(label);
}

void RemoteColdSource::set_idle_work(std::function<bool()> work) {
  s_->idle = std::move(work);
}

uint64_t RemoteColdSource::idle_calls() const {
  return s_->idle_calls;
}

void RemoteColdSource::set_hit_reads(HitReadPlan plan, const store::SegmentStore* store) {
  s_->hits = std::move(plan);
  s_->store = store;
}

int RemoteColdSource::hit_reader(const std::string& key) const {
  if (s_->workers == 0 || s_->store == nullptr) return 0;
  if (s_->hits.shard_reader.empty() && s_->hits.remote_keys.empty()) return 0;
  return s_->hits.reader(key, s_->store->holder(key));
}

bool RemoteColdSource::taken_from_store() const {
  return s_->last_stored;
}

void RemoteColdSource::begin(const std::vector<pic::ColdSegment>& cold) {
  if (s_->workers == 0) {  // computed in take()
    s_->local.begin(cold);
    return;
  }
  HYPIC_REQUIRE(s_->pending.empty(),
                "cold source: the previous query's entries were not all taken");
  std::vector<int64_t> order;
  for (const pic::ColdSegment& c : cold) {
    order.push_back(c.index);
    s_->pending.emplace(c.index, c);
  }
  s_->order = std::make_unique<PromptOrderBuffer>(order);
  // Hits read where they live go first: a worker runs its commands in order, and a hit is
  // only a read, so it is not queued behind the segments that worker computes.
  s_->reads.clear();
  for (const pic::ColdSegment& c : cold) {
    if (!c.stored) continue;
    const int worker = hit_reader(c.key);
    HYPIC_REQUIRE(worker > 0, "cold source: segment " + std::to_string(c.index) +
                                  " is a stored hit that no worker reads");
    Task t{c.index, c.key, c.tokens, c.junction};
    t.read_stored = true;
    s_->watch->assign(worker, c.index,
                      (s_->query_label.empty() ? "" : "of query \"" + s_->query_label + "\", ") +
                          std::string("reading a hit from its shard, ") + task_label("", t));
    s_->sender->send(worker, t);
    s_->reads.emplace(c.index, worker);
  }
  std::vector<double> costs;
  s_->tasks.clear();
  s_->labels.clear();
  s_->task_of.clear();
  for (const pic::ColdSegment& c : cold) {
    if (c.stored) continue;
    costs.push_back(s_->cost.predict(static_cast<int64_t>(c.tokens.size())));
    s_->task_of.emplace(c.index, s_->tasks.size());
    s_->tasks.push_back({c.index, c.key, c.tokens, c.junction, s_->link != nullptr});
    s_->labels.push_back(s_->query_label.empty() ? "" : "of query \"" + s_->query_label + "\"");
  }
  const Schedule plan = make_schedule(s_->policy, costs, s_->use_workers);
  s_->dispatcher =
      std::make_unique<Dispatcher>(plan, std::move(costs), kDispatchDepth, s_->rebalance);
  s_->stats = DispatchStats{};
  s_->stats.busy_s.assign(static_cast<size_t>(s_->use_workers), 0.0);
  s_->stats.segments.assign(static_cast<size_t>(s_->use_workers), 0);
  for (int w = 0; w < s_->use_workers; ++w)
    send_tasks(*s_->sender, *s_->dispatcher, w, s_->tasks, *s_->watch, s_->labels);
}

pic::SegmentEntry RemoteColdSource::take(int64_t index) {
  if (s_->workers == 0) {
    const auto t0 = Clock::now();
    pic::SegmentEntry e = s_->local.take(index);
    samples_.push_back({e.n_tokens, std::chrono::duration<double>(Clock::now() - t0).count()});
    return e;
  }
  const auto it = s_->pending.find(index);
  HYPIC_REQUIRE(it != s_->pending.end(),
                "cold source: segment " + std::to_string(index) + " was not announced");
  const pic::ColdSegment seg = std::move(it->second);
  s_->pending.erase(it);
  while (!s_->order->next_ready()) {
    for (ReceivedEntry& got : wait_entries(*s_->receiver, *s_->watch, &s_->idle, &s_->idle_calls)) {
      const auto read = s_->reads.find(got.segment);
      if (read != s_->reads.end()) {  // a hit read where it lives
        HYPIC_REQUIRE(read->second == got.source,
                      "cold source: rank " + std::to_string(got.source) + " sent segment " +
                          std::to_string(got.segment) + ", which rank " +
                          std::to_string(read->second) + " was asked to read");
        s_->reads.erase(read);
        s_->order->put(std::move(got));
        continue;
      }
      const auto t = s_->task_of.find(got.segment);
      HYPIC_REQUIRE(t != s_->task_of.end(), "cold source: rank " + std::to_string(got.source) +
                                                " sent segment " + std::to_string(got.segment) +
                                                ", which is not one of this query's cold segments");
      const int w = got.source - 1;
      s_->dispatcher->finished(w, static_cast<int64_t>(t->second));
      send_tasks(*s_->sender, *s_->dispatcher, w, s_->tasks, *s_->watch, s_->labels);
      s_->stats.stolen = s_->dispatcher->stolen();
      s_->order->put(std::move(got));
    }
    s_->sender->test();
  }
  ReceivedEntry got = s_->order->pop_next();
  HYPIC_REQUIRE(got.segment == index && got.key == seg.key,
                "cold source: rank " + std::to_string(got.source) + " sent segment " +
                    std::to_string(got.segment) + " where segment " + std::to_string(index) +
                    " was due");
  s_->last_stored = got.entry.arrays.erase(kReadFromShardArray) == 1;
  HYPIC_REQUIRE(!s_->last_stored || seg.stored, "cold source: rank " + std::to_string(got.source) +
                                                    " sent a stored entry for segment " +
                                                    std::to_string(index) +
                                                    ", which it was asked to compute");
  if (!s_->last_stored) {  // computed (a hit whose shard copy was damaged included)
    const double seconds = take_compute_seconds(got.entry);
    const size_t w = static_cast<size_t>(got.source - 1);
    if (w < s_->stats.busy_s.size()) {
      s_->stats.busy_s[w] += seconds;
      ++s_->stats.segments[w];
    }
    samples_.push_back({got.entry.n_tokens, seconds});
  }
  return pic::from_store_entry(std::move(got.entry), s_->model.config(), seg.junction);
}

// ---- serve's hit reads ---------------------------------------------------------------------

HitReads parse_hit_reads(const std::string& text) {
  if (text == "auto") return HitReads::kAuto;
  if (text == "rank0") return HitReads::kRank0;
  if (text == "owner") return HitReads::kOwner;
  throw Error("--hit-reads must be auto, rank0 or owner, got '" + text + "'");
}

const char* hit_reads_name(HitReads mode) {
  switch (mode) {
    case HitReads::kAuto:
      return "auto";
    case HitReads::kRank0:
      return "rank0";
    case HitReads::kOwner:
      return "owner";
  }
  return "?";
}

int HitReadPlan::reader(const std::string& key, const std::string& holder) const {
  if (!holder.empty()) {
    const auto it = shard_reader.find(holder);
    return it == shard_reader.end() ? 0 : it->second;
  }
  const auto it = remote_keys.find(key);
  return it == remote_keys.end() ? 0 : it->second;
}

namespace {

// The rank whose warm-up wrote `shard` (STORE.rank<r>.h5 beside `store_path`), or 0.
int shard_writer(const std::string& store_path, const std::string& shard) {
  const std::string prefix = std::filesystem::path(store_path).filename().string() + ".rank";
  const std::string name = std::filesystem::path(shard).filename().string();
  if (name.size() <= prefix.size() + 3 || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - 3, 3, ".h5") != 0)
    return 0;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 3);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stoi(digits);
}

// A string from rank 0 to every rank.
std::string broadcast_text(MPI_Comm comm, std::string text) {
  uint64_t n = text.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm);
  text.resize(n);
  MPI_Bcast(text.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
  return text;
}

// Every rank's string, on rank 0 (others get an empty list).
std::vector<std::string> gather_text(MPI_Comm comm, const std::string& text) {
  const int n = comm_size(comm);
  const bool root = comm_rank(comm) == 0;
  const int mine = static_cast<int>(text.size());
  std::vector<int> sizes(root ? static_cast<size_t>(n) : 0);
  MPI_Gather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm);
  std::vector<int> offsets(sizes.size(), 0);
  int total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = total;
    total += sizes[i];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Gatherv(text.data(), mine, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
              comm);
  std::vector<std::string> out;
  for (size_t i = 0; i < sizes.size(); ++i)
    out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(sizes[i])));
  return out;
}

}  // namespace

HitReadPlan plan_hit_reads(MPI_Comm comm, HitReads mode, const store::SegmentStore& store) {
  const int ranks = comm_size(comm);
  HitReadPlan plan;
  std::map<std::string, std::string> unreadable;  // shard -> why rank 0 cannot open it
  for (const store::ShardProblem& p : store.shard_problems()) unreadable.emplace(p.path, p.problem);
  nlohmann::json asks = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) asks.push_back({{"shard", ""}, {"keys", false}});
  if (mode != HitReads::kRank0) {
    for (const std::string& shard : store.shard_paths()) {
      const int writer = shard_writer(store.path(), shard);
      const auto why = unreadable.find(shard);
      const bool readable = why == unreadable.end();
      if (writer >= 1 && writer < ranks) {
        if (mode == HitReads::kOwner || !readable) {
          asks[static_cast<size_t>(writer)] = {{"shard", shard}, {"keys", !readable}};
          plan.shard_reader.emplace(shard, writer);
        }
        continue;
      }
      const std::string whose = writer >= 1 ? "its writer, rank " + std::to_string(writer) +
                                                  ", is not in this job of " +
                                                  std::to_string(ranks) + " ranks"
                                            : "it has no writer rank in its name";
      if (readable) {
        if (mode == HitReads::kOwner)
          plan.notes.push_back("shard " + shard + ": " + whose + "; rank 0 reads its hits");
      } else if (mode == HitReads::kOwner) {
        throw Error("shard " + shard + " cannot be read by rank 0 (" + why->second + ") and " +
                    whose + "; run serve with at least " + std::to_string(writer + 1) +
                    " ranks, rank r on the node that holds STORE.rank<r>.h5");
      }
    }
  }
  for (const std::string& shard : store.shard_paths())
    if (unreadable.count(shard) != 0 && plan.shard_reader.count(shard) != 0)
      plan.shard_reader.erase(shard);  // rank 0's store does not hold it: its keys route it
  nlohmann::json message = {{"dtype", static_cast<int>(store.dtype())}, {"asks", asks}};
  broadcast_text(comm, message.dump());
  const std::vector<std::string> replies = gather_text(comm, "");
  for (int r = 1; r < ranks; ++r) {
    const nlohmann::json reply = nlohmann::json::parse(replies[static_cast<size_t>(r)]);
    if (reply.contains("error")) {
      if (mode == HitReads::kOwner) throw Error(reply["error"].get<std::string>());
      // auto: neither rank 0 nor the worker can read it, so its entries are computed again,
      // as they are without hit reads; said in one line.
      plan.notes.push_back("warning: " + reply["error"].get<std::string>() +
                           "; its hits are computed as cold segments");
      for (auto it = plan.shard_reader.begin(); it != plan.shard_reader.end();)
        it = it->second == r ? plan.shard_reader.erase(it) : std::next(it);
      continue;
    }
    if (reply.contains("keys"))
      for (const auto& k : reply["keys"]) plan.remote_keys.emplace(k.get<std::string>(), r);
  }
  return plan;
}

std::unique_ptr<store::SegmentStore> open_hit_shard(MPI_Comm comm, const std::string& fingerprint,
                                                    int junction_code) {
  const nlohmann::json message = nlohmann::json::parse(broadcast_text(comm, ""));
  const nlohmann::json& ask = message["asks"][static_cast<size_t>(comm_rank(comm))];
  const std::string path = ask["shard"].get<std::string>();
  std::unique_ptr<store::SegmentStore> shard;
  nlohmann::json reply = nlohmann::json::object();
  if (!path.empty()) {
    try {
      shard = std::make_unique<store::SegmentStore>(
          store::SegmentStore::open(path, fingerprint, junction_code, store::OpenMode::kRead));
      const DType dtype = static_cast<DType>(message["dtype"].get<int>());
      HYPIC_REQUIRE(shard->dtype() == dtype, std::string("it stores ") +
                                                 dtype_name(shard->dtype()) + ", its store " +
                                                 dtype_name(dtype));
      if (ask["keys"].get<bool>()) reply["keys"] = shard->keys();
    } catch (const std::exception& e) {
      shard.reset();
      const ProcessIdentity me = this_process(comm);
      reply = {{"error", "worker rank " + std::to_string(me.rank) + " (pid " +
                             std::to_string(me.pid) + " on " + me.host +
                             ") cannot read its shard " + path + ": " + e.what() +
                             "; the store and its shards are untouched; make the shard readable "
                             "on that node, or serve with --hit-reads rank0 where rank 0 can read "
                             "it"}};
    }
  }
  gather_text(comm, reply.dump());
  return shard;
}

std::string cost_model_path(const std::string& store_path) {
  return store_path + ".cost-model.json";
}

CostModel load_cost_model_or_default(const std::string& store_path) {
  const std::string path = cost_model_path(store_path);
  if (std::filesystem::exists(path)) return CostModel::load(path);
  return CostModel(0.0, 1.0, 0.0);
}

}  // namespace hypic::cluster
