#include "cluster/distributed.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
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
                DType entry_dtype) {
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
  std::vector<double> costs;
  s_->tasks.clear();
  s_->labels.clear();
  s_->task_of.clear();
  for (const pic::ColdSegment& c : cold) {
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
  const double seconds = take_compute_seconds(got.entry);
  s_->stats.busy_s[static_cast<size_t>(got.source - 1)] += seconds;
  ++s_->stats.segments[static_cast<size_t>(got.source - 1)];
  samples_.push_back({got.entry.n_tokens, seconds});
  return pic::from_store_entry(std::move(got.entry), s_->model.config(), seg.junction);
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
