#include "pic/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "common/copy_stats.hpp"
#include "pic/compose.hpp"
#include "store/checksum.hpp"

namespace hypic::pic {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The key of the prompt units so far (prefix, then segments): a chained content hash, so
// that equal keys mean an identical token sequence from the start of the prompt, unit
// boundaries included (a path in a trie of units).
std::string chain_key(const store::Hash128& parent, const std::vector<int32_t>& unit,
                      store::Hash128& out) {
  store::Fnv1a128 h;
  h.update("hypic.prefix.v1", 15);
  h.update_value<uint64_t>(parent.hi).update_value<uint64_t>(parent.lo);
  h.update_value<uint64_t>(unit.size());
  for (int32_t t : unit) h.update_value<int32_t>(t);
  out = h.digest();
  return store::to_hex(out);
}

}  // namespace

void LocalColdSource::begin(const std::vector<ColdSegment>& cold) {
  pending_.clear();  // nothing is in flight: a query that threw leaves nothing to wait for
  for (const ColdSegment& c : cold) pending_.emplace(c.index, c);
}

SegmentEntry LocalColdSource::take(int64_t index) {
  const auto it = pending_.find(index);
  HYPIC_REQUIRE(it != pending_.end(),
                "cold source: segment " + std::to_string(index) + " was not announced");
  const ColdSegment seg = std::move(it->second);
  pending_.erase(it);
  // On a device the entry stays there: no download, and no upload into the memory tier.
  if (model_.backend().device() != Device::Host)
    return compute_resident_entry(model_, seg.tokens, seg.junction);
  return compute_entry(model_, seg.tokens, seg.junction);
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Full:
      return "full";
    case Mode::Prefix:
      return "prefix";
    case Mode::Pic:
      return "pic";
    case Mode::PicAddition:
      return "pic-addition";
  }
  return "?";
}

Mode parse_mode(const std::string& name) {
  for (Mode m : {Mode::Full, Mode::Prefix, Mode::Pic, Mode::PicAddition})
    if (name == mode_name(m)) return m;
  throw Error("unknown mode '" + name + "' (modes: full, prefix, pic, pic-addition)");
}

bool uses_entries(Mode m) {
  return m == Mode::Pic || m == Mode::PicAddition;
}

Engine::Engine(model::Model& model, std::string model_fingerprint, EngineOptions options,
               store::SegmentStore* store)
    : model_(model),
      fingerprint_(std::move(model_fingerprint)),
      options_(options),
      store_(store),
      local_(model),
      entries_(options.memory_budget_bytes),
      snapshots_(options.memory_budget_bytes) {
  if (model_.backend().device() != Device::Host)
    uploader_ = std::make_unique<EntryUploader>(model_.backend());
  if (store_ != nullptr)
    HYPIC_REQUIRE(store_->junction() == options_.junction.store_code(),
                  "store " + store_->path() + " was made with junction " +
                      JunctionSpec::from_store_code(store_->junction()).to_string() +
                      ", this run uses " + options_.junction.to_string());
  parse_entry_tolerance(options_.entry_tolerance, DType::BF16);  // throws on a bad value
}

std::string Engine::entry_key(const std::vector<int32_t>& segment) const {
  const int w = options_.junction.tokens_for(static_cast<int64_t>(segment.size()));
  return store::entry_key(fingerprint_, segment, w);
}

void Engine::queue_prefetch(const Query& next) {
  prefetch_.clear();
  if (store_ == nullptr || !uses_entries(options_.mode)) return;
  for (const auto& seg : next.segments) {
    if (seg.empty()) continue;
    const int w = options_.junction.tokens_for(static_cast<int64_t>(seg.size()));
    std::string key = store::entry_key(fingerprint_, seg, w);
    if (!entries_.get(key) && store_->contains(key) && !(remote_hits_ && remote_hits_(key)))
      prefetch_.emplace_back(std::move(key), w);
  }
}

bool Engine::prefetch_one() {
  while (!prefetch_.empty()) {
    const auto [key, w] = prefetch_.front();
    prefetch_.pop_front();
    if (entries_.get(key)) continue;  // a repeated segment, or meanwhile computed
    store::ReadResult rr = store_->read(key);
    if (rr.status != store::EntryStatus::kValid) continue;  // run() reports a damaged one
    keep_in_memory(key, from_store_entry(std::move(*rr.entry), model_.config(), w));
    ++prefetched_;
    break;
  }
  return !prefetch_.empty();
}

size_t Engine::memory_bytes() const {
  return entries_.bytes() + snapshots_.bytes();
}
uint64_t Engine::memory_evictions() const {
  return entries_.evictions() + snapshots_.evictions();
}

QueryResult Engine::run(const Query& q) {
  const model::ModelConfig& cfg = model_.config();
  QueryResult r;
  r.id = q.id;
  r.segments = static_cast<int>(q.segments.size());
  HYPIC_REQUIRE(!q.question.empty(), "query " + q.id + " has no question tokens");
  int64_t total = static_cast<int64_t>(q.prefix.size() + q.question.size());
  for (size_t i = 0; i < q.segments.size(); ++i) {
    const int64_t n = static_cast<int64_t>(q.segments[i].size());
    HYPIC_REQUIRE(n > 0, "query " + q.id + ": segment " + std::to_string(i + 1) + " is empty");
    HYPIC_REQUIRE(n <= cfg.max_position_embeddings,
                  "query " + q.id + ": segment " + std::to_string(i + 1) + " has " +
                      std::to_string(n) + " tokens, more than the model's context of " +
                      std::to_string(cfg.max_position_embeddings));
    total += n;
  }
  const std::string too_long = model::context_overflow(cfg, total, q.max_new_tokens);
  HYPIC_REQUIRE(too_long.empty(), "query " + q.id + ": " + too_long);
  r.prompt_tokens = total;

  switch (options_.mode) {
    case Mode::Full:
      run_full(q, r);
      break;
    case Mode::Prefix:
      run_prefix(q, r);
      break;
    case Mode::Pic:
    case Mode::PicAddition:
      run_pic(q, r);
      break;
  }
  return r;
}

std::vector<float> Engine::final_prefill(const std::vector<int32_t>& tokens,
                                         model::InferenceCache& cache, QueryResult& r) {
  Tensor logits = model_.prefill(tokens, cache, model::LogitsMode::Last);
  r.tokens_recomputed += static_cast<int64_t>(tokens.size());
  if (options_.keep_last_hidden) r.last_hidden = model_.last_hidden();
  return logits.take_vector();
}

void Engine::decode(std::vector<float> logits, model::InferenceCache& cache, const Query& q,
                    QueryResult& r) {
  const int max_new_tokens = q.max_new_tokens;
  const auto t0 = Clock::now();
  if (options_.keep_first_logits) r.first_logits = logits;
  const std::vector<int>& eos = model_.config().eos_token_ids;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  // The K/V rows of every step up front: the steps append in place (no re-allocation).
  if (max_new_tokens > 1)
    for (model::LayerCache& lc : cache.layers) lc.reserve_kv(cache.n_tokens + max_new_tokens - 1);
  for (int i = 0; i < max_new_tokens; ++i) {
    const int32_t next = model::argmax_no_repeat(logits.data(), vocab, r.answer, q.no_repeat_ngram);
    r.answer.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
    if (i + 1 < max_new_tokens) logits = model_.decode_step(next, cache).take_vector();
  }
  r.times.decode = seconds_since(t0);
}

void Engine::run_full(const Query& q, QueryResult& r) {
  const auto t0 = Clock::now();
  std::vector<int32_t> prompt = q.prefix;
  for (const auto& s : q.segments) prompt.insert(prompt.end(), s.begin(), s.end());
  prompt.insert(prompt.end(), q.question.begin(), q.question.end());
  model::InferenceCache cache = model_.new_cache();
  std::vector<float> logits = final_prefill(prompt, cache, r);
  r.times.prefill = r.times.ttft = seconds_since(t0);
  decode(std::move(logits), cache, q, r);
}

void Engine::run_prefix(const Query& q, QueryResult& r) {
  const auto t0 = Clock::now();
  std::vector<const std::vector<int32_t>*> units;
  if (!q.prefix.empty()) units.push_back(&q.prefix);
  for (const auto& s : q.segments) units.push_back(&s);
  std::vector<std::string> keys;
  store::Hash128 h;
  for (const auto* u : units) keys.push_back(chain_key(h, *u, h));

  // The longest prompt start that has a snapshot.
  model::InferenceCache cache;
  size_t start = 0;
  for (size_t i = units.size(); i-- > 0;) {
    if (auto snap = snapshots_.get(keys[i])) {
      cache = *snap;
      start = i + 1;
      break;
    }
  }
  if (start == 0) cache = model_.new_cache();
  r.prefix_units_reused = static_cast<int>(start);
  r.times.prefix_restore = seconds_since(t0);

  for (size_t i = start; i < units.size(); ++i) {
    auto t1 = Clock::now();
    model_.prefill(*units[i], cache, model::LogitsMode::None);
    r.tokens_recomputed += static_cast<int64_t>(units[i]->size());
    r.times.prefill += seconds_since(t1);
    t1 = Clock::now();
    snapshots_.put(keys[i], std::make_shared<const model::InferenceCache>(cache), cache.bytes());
    r.times.snapshot_save += seconds_since(t1);
  }
  const auto t2 = Clock::now();
  std::vector<float> logits = final_prefill(q.question, cache, r);
  r.times.question = seconds_since(t2);
  r.times.ttft = seconds_since(t0) - r.times.snapshot_save;
  decode(std::move(logits), cache, q, r);
}

Engine::Lookup Engine::lookup_cached(const std::string& key, int w, QueryResult& r) {
  Lookup lk;
  const auto t0 = Clock::now();
  if ((lk.entry = entries_.get(key))) {
    lk.tier = Lookup::kMemory;
    r.times.store_read += seconds_since(t0);
    return lk;
  }
  if (remote_hits_ && remote_hits_(key)) {  // read by the worker holding its shard
    lk.tier = Lookup::kRemote;
    r.times.store_read += seconds_since(t0);
    return lk;
  }
  if (store_ != nullptr) {
    store::ReadResult rr = store_->read(key);
    if (rr.status == store::EntryStatus::kValid) {
      lk.entry = keep_in_memory(key, from_store_entry(std::move(*rr.entry), model_.config(), w));
      lk.tier = Lookup::kStore;
      r.times.store_read += seconds_since(t0);
      return lk;
    }
    lk.damaged = rr.status == store::EntryStatus::kDamaged;
  }
  r.times.store_read += seconds_since(t0);
  return lk;
}

std::shared_ptr<const SegmentEntry> Engine::keep_cold(const std::string& key,
                                                      SegmentEntry computed) {
  if (store_ != nullptr) {
    // Per-head forms of T for host entries (a resident one keeps T dense on its device).
    if (!computed.resident()) {
      const double tol = parse_entry_tolerance(options_.entry_tolerance, store_->dtype());
      if (tol > 0) choose_entry_forms(computed, tol, store_->dtype());
    }
    round_to_dtype(computed, store_->dtype(), &model_.backend());
    if (store_->writable()) {
      try {
        if (computed.resident())  // the store keeps host arrays: one download, for it only
          store_->put(key, store_view(download_entry(computed)));
        else
          store_->put(key, store_view(computed));  // from its own buffers
      } catch (const Error& e) {
        if (!options_.answer_when_store_is_full || store_->space_problem().empty()) throw;
        std::fprintf(stderr,
                     "hypic: warning: %s; answering on without caching new entries (the "
                     "store keeps its committed ones)\n",
                     e.what());
        store_->reopen_for_reading();  // said once: the store is no longer writable
      }
    }
  }
  return keep_in_memory(key, std::move(computed));
}

std::shared_ptr<const SegmentEntry> Engine::keep_in_memory(const std::string& key,
                                                           SegmentEntry entry) {
  auto e = std::make_shared<const SegmentEntry>(
      uploader_ && !entry.resident() ? uploader_->upload(std::move(entry)) : std::move(entry));
  entries_.put(key, e, e->bytes());
  return e;
}

// Every segment is routed first (memory tier, store, or cold), so that the cold ones can be
// computed elsewhere while the hits (and the prefix) are composed here; the cold source
// computes them in place when there are no workers. A segment repeated within the query is
// computed once; its later copies count as memory hits.
void Engine::run_pic(const Query& q, QueryResult& r) {
  const auto t0 = Clock::now();
  const bool addition = options_.mode == Mode::PicAddition;
  const size_t k = q.segments.size();
  std::vector<Lookup> routed(k);
  std::vector<std::string> keys(k);
  std::vector<ColdSegment> cold;
  std::map<std::string, int64_t> first_cold;  // key -> the segment that computes it
  std::vector<int64_t> copy_of(k, -1);        // a later copy of a cold segment
  for (size_t i = 0; i < k; ++i) {
    const auto& seg = q.segments[i];
    const int w = options_.junction.tokens_for(static_cast<int64_t>(seg.size()));
    keys[i] = store::entry_key(fingerprint_, seg, w);
    const auto dup = first_cold.find(keys[i]);
    if (dup != first_cold.end()) {
      copy_of[i] = dup->second;
      continue;
    }
    routed[i] = lookup_cached(keys[i], w, r);
    if (!routed[i].entry) {
      first_cold.emplace(keys[i], static_cast<int64_t>(i));
      cold.push_back({static_cast<int64_t>(i), keys[i], seg, w, routed[i].tier == Lookup::kRemote});
    }
  }
  if (!cold.empty()) cold_source_->begin(cold);

  model::InferenceCache cache = model_.new_cache();
  if (!q.prefix.empty()) {
    const auto tp = Clock::now();
    model_.prefill(q.prefix, cache, model::LogitsMode::None);
    r.tokens_recomputed += static_cast<int64_t>(q.prefix.size());
    r.times.prefill = seconds_since(tp);
  }
  // Every entry first (cold ones as their source delivers them, in prompt order), then all
  // junction windows in one layer-by-layer pass with the splices in between.
  std::vector<std::shared_ptr<const SegmentEntry>> entries(k);
  for (size_t i = 0; i < k; ++i) {
    const auto& seg = q.segments[i];
    if (copy_of[i] >= 0) {
      entries[i] = entries[static_cast<size_t>(copy_of[i])];
      ++r.hits_memory;
    } else if (routed[i].entry) {
      entries[i] = routed[i].entry;
      ++(routed[i].tier == Lookup::kMemory ? r.hits_memory : r.hits_store);
    } else {
      const auto t1 = Clock::now();
      const uint64_t copied = stats::entry_bytes_copied();
      SegmentEntry got = cold_source_->take(static_cast<int64_t>(i));
      if (cold_source_->taken_from_store()) {  // a hit, read from its shard by a worker
        r.hit_bytes_from_workers += got.bytes();
        entries[i] = keep_in_memory(keys[i], std::move(got));
        ++r.hits_store;
        ++r.hits_read_by_workers;
        r.times.store_read += seconds_since(t1);
        continue;
      }
      if (routed[i].tier == Lookup::kRemote) ++r.damaged;  // its shard's copy was damaged
      entries[i] = keep_cold(keys[i], std::move(got));
      r.cold_bytes_copied += stats::entry_bytes_copied() - copied;
      r.cold_entry_bytes += entries[i]->bytes();
      r.times.cold_fill += seconds_since(t1);
      ++r.cold;
      r.cold_tokens += static_cast<int64_t>(seg.size());
    }
    if (routed[i].damaged) ++r.damaged;
  }
  std::vector<PlacedSegment> placed(k);
  for (size_t i = 0; i < k; ++i) {
    placed[i] = {&q.segments[i], entries[i].get()};
    r.tokens_recomputed += entries[i]->junction;
  }
  // The question runs as the pass's last window: its time is in `junction`.
  const auto t2 = Clock::now();
  StateShareLog shares;
  Tensor question_logits =
      compose_with_question(model_, placed, q.question, addition, cache, r.times.composition,
                            options_.measure_state_contribution ? &shares : nullptr);
  r.tokens_recomputed += static_cast<int64_t>(q.question.size());
  if (options_.keep_last_hidden) r.last_hidden = model_.last_hidden();
  std::vector<float> logits = question_logits.take_vector();
  r.times.state_measure = shares.seconds;
  r.times.junction = seconds_since(t2) - r.times.composition - shares.seconds;
  r.state_shares = std::move(shares.shares);
  r.times.ttft = seconds_since(t0) - r.times.state_measure;
  decode(std::move(logits), cache, q, r);
}

}  // namespace hypic::pic
