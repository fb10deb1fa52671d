#pragma once
// The PIC engine in one process: answers a query [prefix] seg_1 … seg_k [question] in one
// of the caching modes, with a memory tier in front of the segment store, and reports
// time to first token by phase. Under MPI this is what rank 0, the combine driver, runs;
// its cold segments then come from the workers through a ColdSource (cluster/distributed.hpp).
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/forward.hpp"
#include "pic/compose.hpp"
#include "pic/entry_upload.hpp"
#include "pic/junction.hpp"
#include "pic/lru_cache.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"

namespace hypic::pic {

enum class Mode { Full, Prefix, Pic, PicAddition };
const char* mode_name(Mode m);  // "full", "prefix", "pic", "pic-addition"
// Throws hypic::Error naming the modes.
Mode parse_mode(const std::string& name);
bool uses_entries(Mode m);  // pic, pic-addition

struct EngineOptions {
  Mode mode = Mode::Pic;
  JunctionSpec junction;
  size_t memory_budget_bytes = size_t(1) << 30;  // entries (pic) or snapshots (prefix)
  bool keep_first_logits = false;                // QueryResult::first_logits
  bool keep_last_hidden = false;                 // QueryResult::last_hidden
  // pic modes: QueryResult::state_shares, ‖T·S_in‖/‖S‖ per linear layer at every splice
  // (compose.hpp); the measuring time is reported apart (PhaseTimes::state_measure).
  bool measure_state_contribution = false;
  // A store write that fails for lack of space (a full disk, `ulimit -f`): false, the query
  // fails; true (serve), one warning line, the store is reopened for reading (its committed
  // entries intact and still served) and the answers go on without caching new entries.
  bool answer_when_store_is_full = false;
  // Entries written to the store keep T in per-head forms chosen at this tolerance
  // (entry_forms.hpp, docs/entry-forms.md): "auto" (the store dtype's unit roundoff), or a
  // number >= 0 (0: T dense, today's entries bit for bit). Without a store, T stays dense.
  std::string entry_tolerance = "auto";
};

struct Query {
  std::string id;
  std::vector<int32_t> prefix;                 // plain prefill before the segments
  std::vector<std::vector<int32_t>> segments;  // each non-empty
  std::vector<int32_t> question;               // non-empty
  int max_new_tokens = 16;
  int no_repeat_ngram = 0;  // > 0: no n-gram of this size occurs twice in the answer
                            // (model::argmax_no_repeat); 0: plain greedy
};

// Seconds per phase of one query. ttft covers everything up to the first token's logits
// except snapshot_save (prefix mode), reported apart.
struct PhaseTimes {
  double store_read = 0;      // memory-tier lookups, store reads and decoding
  double cold_fill = 0;       // computing missing entries and writing them back
  double composition = 0;     // T·S + S(R|0), conv tails, re-rotated K and V
  double junction = 0;        // junction windows through every layer (pic modes: and the
                              // question, which runs as the same pass's last window)
  double prefix_restore = 0;  // prefix mode: copying the longest matching snapshot
  double prefill = 0;         // plain prefill (full mode; prefix's unmatched segments; the
                              // prompt prefix in pic modes)
  double question = 0;        // the question's prefill, up to the first token's logits
                              // (full, prefix; pic modes: 0, counted in junction)
  double snapshot_save = 0;   // prefix mode: keeping snapshots at segment boundaries
  double state_measure = 0;   // EngineOptions::measure_state_contribution; not in ttft
  double ttft = 0;
  double decode = 0;  // the remaining greedy tokens
};

struct QueryResult {
  std::string id;
  std::vector<int32_t> answer;  // greedy tokens, stopped after an end-of-sequence id
  PhaseTimes times;
  int segments = 0;
  int hits_memory = 0;
  int hits_store = 0;
  int cold = 0;                 // computed now (damaged store entries included)
  int damaged = 0;              // store entries that failed their checksum
  int prefix_units_reused = 0;  // prefix mode: prompt units (prefix, segments) restored
  int64_t prompt_tokens = 0;
  int64_t tokens_recomputed = 0;  // prompt tokens run through the network for this query
  int64_t cold_tokens = 0;        // tokens of segments computed cold
  // Debug statistics of the cold entries: their size in memory (f32), and the bytes copied or
  // converted on this rank between the cold source and the memory tier and store
  // (common/copy_stats.hpp; docs/engine.md, "Bytes copied per cold entry").
  uint64_t cold_entry_bytes = 0;
  uint64_t cold_bytes_copied = 0;
  // Store hits a worker read from the shard it holds and sent (serve --hit-reads; counted in
  // hits_store too), and their bytes as received (f32).
  int hits_read_by_workers = 0;
  uint64_t hit_bytes_from_workers = 0;
  std::vector<float> first_logits;       // [vocab], when EngineOptions::keep_first_logits
  std::vector<StateShare> state_shares;  // when EngineOptions::measure_state_contribution
  std::vector<float> last_hidden;        // [hidden], last prompt token, residual stream before
                                         // the final norm, when keep_last_hidden
};

// One segment of a query that is in neither the memory tier nor the store.
struct ColdSegment {
  int64_t index = 0;  // position among the query's segments
  std::string key;
  std::vector<int32_t> tokens;
  int junction = 0;  // w
  // A store hit that a worker reads from its shard (Engine::set_remote_hits), not a segment
  // to compute; its entry is computed only when that copy turns out damaged.
  bool stored = false;
};

// Where a query's cold entries come from: computed in place (LocalColdSource) or by the
// workers (cluster::RemoteColdSource, rank 0's view of them). begin() gets every cold segment
// of a query before the composition starts; take() is then called in prompt order and blocks
// until that entry is there. Entries come f32, not yet rounded to the store: in host memory
// (compute_entry; entries through MPI) or resident on the model's device (computed there,
// compute_resident_entry, or received there through NCCL), which the memory tier then keeps
// without an upload.
class ColdSource {
 public:
  virtual ~ColdSource() = default;
  virtual void begin(const std::vector<ColdSegment>& cold) = 0;
  virtual SegmentEntry take(int64_t index) = 0;
  // Whether the last take() returned a stored entry (a ColdSegment::stored one read from its
  // shard) rather than a computed one.
  virtual bool taken_from_store() const { return false; }
};

// Computes each cold entry in take(), in this process: one rank, or an engine without workers.
class LocalColdSource : public ColdSource {
 public:
  explicit LocalColdSource(model::Model& model) : model_(model) {}
  void begin(const std::vector<ColdSegment>& cold) override;
  SegmentEntry take(int64_t index) override;

 private:
  model::Model& model_;
  std::map<int64_t, ColdSegment> pending_;  // index -> segment, until taken
};

class Engine {
 public:
  // `store` may be null (no persistence: cold entries stay in the memory tier). When
  // given, it must be made for this model and junction (SegmentStore::open checks).
  Engine(model::Model& model, std::string model_fingerprint, EngineOptions options,
         store::SegmentStore* store = nullptr);
  Engine(const Engine&) = delete;  // cold_source_ may point at local_
  Engine& operator=(const Engine&) = delete;

  QueryResult run(const Query& query);

  // Cold segments then come from `source` (not owned; null: computed in place).
  void set_cold_source(ColdSource* source) { cold_source_ = source != nullptr ? source : &local_; }
  // Store hits that a worker reads where they live (serve --hit-reads, docs/cluster.md):
  // `remote(key)` true routes a segment not in the memory tier to the cold source as a
  // ColdSegment::stored one instead of reading the store here; it is not read ahead either.
  void set_remote_hits(std::function<bool(const std::string& key)> remote) {
    remote_hits_ = std::move(remote);
  }

  // Reading a query's store hits ahead, while rank 0 would otherwise wait for the workers
  // (RemoteColdSource::set_idle_work). queue_prefetch replaces the queue with the segments of
  // `next` that the store has and the memory tier lacks (pic modes with a store; else
  // nothing). prefetch_one reads one of them into the memory tier and returns whether more
  // are queued. Results do not change: the entries are the ones run() would read; only their
  // tier (memory instead of store hits) and the time spent in run() do.
  void queue_prefetch(const Query& next);
  bool prefetch_one();
  uint64_t prefetched() const { return prefetched_; }  // entries read ahead so far

  const EngineOptions& options() const { return options_; }
  const std::string& fingerprint() const { return fingerprint_; }
  std::string entry_key(const std::vector<int32_t>& segment) const;
  size_t memory_bytes() const;
  uint64_t memory_evictions() const;
  // Entries (and their bytes) uploaded into a device-resident memory tier so far; 0 on the
  // host. A query whose entries all hit the memory tier uploads none.
  uint64_t entries_uploaded() const { return uploader_ ? uploader_->entries() : 0; }
  uint64_t bytes_uploaded() const { return uploader_ ? uploader_->bytes() : 0; }

 private:
  struct Lookup {
    std::shared_ptr<const SegmentEntry> entry;
    enum { kMemory, kStore, kRemote, kCold } tier = kCold;
    bool damaged = false;
  };
  // The memory tier, then the store; a null entry when the segment is cold.
  Lookup lookup_cached(const std::string& key, int w, QueryResult& r);
  // Rounds a freshly computed entry to the store's dtype (on the device when resident), writes
  // it back (a resident one downloaded for that), keeps it in memory.
  std::shared_ptr<const SegmentEntry> keep_cold(const std::string& key, SegmentEntry computed);
  // Puts an entry into the memory tier: resident on the model's device when it computes on one
  // (a host entry uploaded once, EntryUploader; a resident one as it is), else on the host.
  std::shared_ptr<const SegmentEntry> keep_in_memory(const std::string& key, SegmentEntry entry);
  void run_full(const Query& q, QueryResult& r);
  void run_prefix(const Query& q, QueryResult& r);
  void run_pic(const Query& q, QueryResult& r);
  // Prefill of the last part of the prompt: logits of its last token, and the hidden state.
  std::vector<float> final_prefill(const std::vector<int32_t>& tokens, model::InferenceCache& cache,
                                   QueryResult& r);
  void decode(std::vector<float> logits, model::InferenceCache& cache, const Query& q,
              QueryResult& r);

  model::Model& model_;
  std::string fingerprint_;
  EngineOptions options_;
  store::SegmentStore* store_;
  LocalColdSource local_;
  ColdSource* cold_source_ = &local_;
  LruCache<SegmentEntry> entries_;                    // resident on the device when computing there
  LruCache<model::InferenceCache> snapshots_;         // device caches when computing on a device
  std::unique_ptr<EntryUploader> uploader_;           // computing on a device only
  std::deque<std::pair<std::string, int>> prefetch_;  // key, junction tokens
  uint64_t prefetched_ = 0;
  std::function<bool(const std::string& key)> remote_hits_;
};

}  // namespace hypic::pic
