#pragma once
// Segment entries computed across MPI ranks (docs/cluster.md, "Wiring warm-up and serve").
// Rank 0 plans; ranks 1 … N−1 are workers that compute entries with the same
// pic::compute_entry as one process. A worker either sends each entry to rank 0, the store's only
// writer, or (a sharded warm-up, WarmupOptions::writers) puts it into its own shard of the store
// and sends rank 0 only a receipt. With one rank, rank 0 computes everything itself.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/cost_model.hpp"
#include "cluster/lpt.hpp"
#include "cluster/messages.hpp"
#include "cluster/watch.hpp"
#include "hypic/kernels/device_link.hpp"
#include "pic/engine.hpp"
#include "pic/junction.hpp"
#include "store/segment_store.hpp"

namespace hypic::cluster {

// The reserved array a worker adds to each entry it sends: its compute time in seconds (one
// float). Rank 0 removes it before the entry is used or stored.
inline constexpr const char* kComputeSecondsArray = "_hypic/compute_seconds";
// The reserved array that makes a message a receipt (a sharded warm-up): the worker has put the
// entry into its shard and committed it; the message holds no other array than the two reserved.
inline constexpr const char* kStoredInShardArray = "_hypic/stored_in_shard";
// The reserved array that marks an entry a worker read from its shard (serve's hit reads, one
// float, 1): a store hit, not a computed entry. Rank 0 removes it before the entry is used.
inline constexpr const char* kReadFromShardArray = "_hypic/read_from_shard";

// A worker's loop: announces itself to rank 0 (announce_worker; rank 0 watches it
// with one WorkerWatch per call), computes every Task from rank 0 (junction window
// from `junction`), sends the entry back non-blocking, and returns at Shutdown. A task that
// throws is reported to rank 0 (run_or_report), which ends the job naming this rank and the
// segment; a worker that dies is named by rank 0's WorkerWatch.
// Testing aid: with HYPIC_DEBUG_WORKER_DELAY_MS=N in its environment, a worker prints
// "hypic: debug: worker rank R pid P" once and sleeps N ms before each segment.
// The NCCL path (a `link`, and a Task with to_device): the entry is computed resident on the
// worker's device (no download), its values go to rank 0's device through the link, beside the
// next segment's compute, and MPI carries its layout and compute time (device_entries.hpp).
// `shard` (a sharded warm-up; null: send entries): each entry is put into this store, committed,
// and only a receipt (kStoredInShardArray and the compute time) goes to rank 0.
// `entry_dtype`: the store's dtype the forms are chosen for (fp8 forms only where it keeps them).
// `hit_shard` (serve with --hit-reads owner|auto): the shard this worker reads hits from; a Task
// with read_stored sends that shard's copy (marked kReadFromShardArray), or computes the entry
// when the copy is missing or damaged.
void run_worker(MPI_Comm comm, model::Model& model, const pic::JunctionSpec& junction,
                kernels::DeviceLink* link = nullptr, double entry_tolerance = 0,
                store::SegmentStore* shard = nullptr, DType entry_dtype = DType::BF16,
                store::SegmentStore* hit_shard = nullptr);

// Tells every worker to stop (rank 0; nothing to do with one rank).
void shutdown_workers(MPI_Comm comm);

// Who writes a warm-up's entries (docs/cluster.md, "Entries to the store").
enum class Writers {
  kRank0,   // every entry travels to rank 0, which puts it into the store: the only writer
  kShards,  // each worker puts its entries into its own shard, STORE.rank<r>.h5 (store/shards.hpp)
};

struct WarmupOptions {
  pic::JunctionSpec junction;
  // With several ranks: who writes. With one rank, rank 0 writes the store file either way.
  Writers writers = Writers::kRank0;
  // Workers of a sharded warm-up: the store's path (its shards go beside it).
  std::string store_path;
  bool sync_to_disk = false;  // the shards' writers fsync after each entry (warmup --sync)
  // Rank 0, optional: a line to say (a damaged shard moved aside, ...).
  std::function<void(const std::string& line)> note;
  CostModel cost;  // plans the split (LPT); only the ratios matter
  double progress_interval_s = 0.5;
  // Rank 0: called with a progress line (at most once per interval, and at the end).
  std::function<void(const std::string& line, bool final)> progress;
  // Rank 0, optional: a name per document (the corpus id), used when a worker dies holding it.
  std::vector<std::string> labels;
  // Rank 0: ends the message when a worker dies (what became of the store, how to resume).
  std::string after_death = "rerun to resume";
  // Per-head forms of T (pic/entry_forms.hpp) at this tolerance; 0 keeps T dense. The forms
  // are chosen for entry_dtype (--dtype); rank 0 refuses entries whose fp8 forms its store's
  // dtype would not keep.
  double entry_tolerance = 0;
  DType entry_dtype = DType::BF16;
};

struct WarmupResult {  // filled on rank 0
  size_t total = 0;    // documents
  size_t computed = 0;
  size_t present = 0;  // already in the store (or repeated in the corpus)
  int64_t computed_tokens = 0;
  double seconds = 0;
  std::vector<CostSample> samples;        // measured compute time per computed entry
  int writers = 1;                        // processes that wrote entries (1: rank 0 only)
  std::vector<std::string> moved_shards;  // damaged shards moved aside (PATH.damaged…)
};

// What a warm-up computes: the documents whose entry `stored` lacks, each key once, in
// corpus order, as tasks carrying their junction window. labels[i] names task i's document
// ("document \"ID\"" from `names`, "" without).
struct WarmupPlan {
  std::vector<Task> tasks;
  std::vector<std::string> labels;
  int64_t missing_tokens = 0;
};
WarmupPlan plan_warmup(const std::vector<std::vector<int32_t>>& docs,
                       const std::string& fingerprint, const pic::JunctionSpec& junction,
                       const std::function<bool(const std::string& key)>& stored,
                       const std::vector<std::string>& names = {});

// Collective over `comm`. On rank 0, `docs` are the corpus's token lists and `store` the
// open, writable store; on workers both are ignored (run_worker runs until rank 0 is done).
// Entries already in the store (its shards included) are skipped. kRank0: each new entry is
// put as it arrives. kShards with workers: rank 0 moves every shard that cannot be read aside
// (naming it through `note`; its entries are then missing and recomputed), plans, has each
// worker open its shard STORE.rank<r>.h5 (created or resumed), records the shards in the
// manifest, and counts receipts; it never receives an entry's arrays.
WarmupResult warmup_across_ranks(MPI_Comm comm, model::Model& model, const std::string& fingerprint,
                                 const std::vector<std::vector<int32_t>>& docs,
                                 store::SegmentStore* store, const WarmupOptions& options);

// Who reads serve's store hits that live in the workers' shards (docs/cluster.md, "Hits read
// where they live", serve --hit-reads):
enum class HitReads {
  kAuto,   // rank 0 reads every shard it can open; a worker reads its own shard where rank 0
           // cannot (node-local storage)
  kRank0,  // rank 0 reads every hit itself (a shared file system), as before
  kOwner,  // worker r reads the hits in the shard STORE.rank<r>.h5 and sends them to rank 0
};
HitReads parse_hit_reads(const std::string& text);  // auto | rank0 | owner; else a hypic::Error
const char* hit_reads_name(HitReads mode);

// Rank 0's plan of who reads which hit.
struct HitReadPlan {
  std::map<std::string, int> shard_reader;  // shard path (SegmentStore::shard_paths) -> worker
  // The keys of the shards rank 0 cannot open, from their workers -> that worker.
  std::map<std::string, int> remote_keys;
  std::vector<std::string> notes;  // lines for rank 0 to say (a shard it reads itself, and why)
  // The worker that reads `key`, given the file the store on rank 0 would read it from
  // (SegmentStore::holder); 0: rank 0 reads it (or no file holds it).
  int reader(const std::string& key, const std::string& holder) const;
};

// Collective over `comm` (serve with workers, a pic mode and a store; rank 0 and every worker
// call their half). Rank 0 decides from its store's manifest which worker reads each shard:
// worker r the shard STORE.rank<r>.h5 it wrote (kOwner: every such shard; kAuto: those rank 0
// cannot open); a shard whose writer rank is not in this job is read by rank 0 (a note), or,
// when rank 0 cannot open it under kOwner, the job stops with a hypic::Error naming the shard.
// Each worker asked opens its shard for reading (and sends its keys when rank 0 cannot open
// it); one that cannot is named by rank 0: "worker rank R (pid P on HOST) cannot read its shard
// S: why; ...". kRank0 needs no call.
HitReadPlan plan_hit_reads(MPI_Comm comm, HitReads mode, const store::SegmentStore& store);
// The worker's half: the shard it reads hits from, open for reading (empty: none).
std::unique_ptr<store::SegmentStore> open_hit_shard(MPI_Comm comm, const std::string& fingerprint,
                                                    int junction_code);

// How the last query's cold segments were spread (RemoteColdSource::last_query()).
struct DispatchStats {
  std::vector<double> busy_s;     // per worker used: the compute seconds it reported
  std::vector<int64_t> segments;  // per worker used: segments it computed
  int64_t stolen = 0;             // segments computed by another worker than planned
};

// Rank 0's cold source for Engine: scatters a query's cold segments over the workers with
// LPT (Dispatcher: two segments ahead per worker, and a worker done early takes the
// tail of a slower one's list) and hands entries back in prompt order as they arrive. With one rank
// it computes them in place (the same pic::compute_entry, so the results do not depend on the
// number of ranks).
class RemoteColdSource : public pic::ColdSource {
 public:
  // `after_death` ends the message when a worker dies (what became of the store, how to
  // resume).
  // `link` (the NCCL path; null: host memory and MPI): the workers send their entries into
  // rank 0's device memory, and take() returns them resident there.
  RemoteColdSource(MPI_Comm comm, model::Model& model, CostModel cost,
                   const std::string& after_death = "rerun to resume",
                   kernels::DeviceLink* link = nullptr);
  ~RemoteColdSource() override;
  void begin(const std::vector<pic::ColdSegment>& cold) override;
  pic::SegmentEntry take(int64_t index) override;
  // Plans the next queries with `policy` over the first `workers` workers (default: LPT over
  // all of them, rebalanced). `rebalance` false keeps every segment on its planned worker.
  // For benchmarks; workers is capped at the ranks there are.
  void set_plan(Policy policy, int workers, bool rebalance = true);
  // Per-worker compute time, segments and steals of the last query (with workers).
  const DispatchStats& last_query() const;
  // Names the query the next begin() belongs to, for the message when a worker dies.
  void set_query_label(std::string label);
  // Work rank 0 does while it waits for an entry, one small unit per call, instead of
  // sleeping; `work` returns whether more is left. Serve reads the next query's store hits
  // this way (Engine::prefetch_one). With one rank there is no waiting, so it is not called.
  void set_idle_work(std::function<bool()> work);
  uint64_t idle_calls() const;  // how often the idle work ran
  // Serve's hit reads: the plan of plan_hit_reads, over `store` (rank 0's, kept open by the
  // caller). hit_reader(key) is the worker that reads that hit (0: rank 0 reads it); a
  // ColdSegment::stored segment goes to it ahead of the computed ones.
  void set_hit_reads(HitReadPlan plan, const store::SegmentStore* store);
  int hit_reader(const std::string& key) const;
  bool taken_from_store() const override;
  // Measured compute times of every entry taken so far.
  const std::vector<CostSample>& samples() const { return samples_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::vector<CostSample> samples_;
};

// The cost-model file kept next to a store: STORE.cost-model.json.
std::string cost_model_path(const std::string& store_path);
// The saved model when there is one, else t(n) = n (planning by token count until measured).
CostModel load_cost_model_or_default(const std::string& store_path);

}  // namespace hypic::cluster
