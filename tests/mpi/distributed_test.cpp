// Warm-up and serving across ranks give what one process gives: the same store entries
// (bit for bit in f32) and the same answers and first-token logits, at any number of ranks.
// Rank 0 runs the one-process reference itself, inside the test.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../unit/pic_test_util.hpp"
#include "cluster/distributed.hpp"
#include "cluster/world.hpp"
#include "mpi_device_link.hpp"
#include "pic/engine.hpp"
#include "store/segment_store.hpp"
#include "store/shards.hpp"

namespace {
namespace fs = std::filesystem;
using hypic::cluster::Communicator;
using hypic::pic::Engine;
using hypic::store::SegmentStore;

// A folder private to this run; only rank 0 uses it.
fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("hypic-dist-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

SegmentStore new_store(const fs::path& path, const std::string& fp, hypic::DType dt) {
  hypic::store::StoreOptions o;
  o.model_fingerprint = fp;
  o.junction = 4;
  o.dtype = dt;
  return SegmentStore::create(path.string(), o);
}

// Skewed lengths, and one document repeated.
std::vector<std::vector<int32_t>> corpus(int vocab) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> docs;
  for (int n : {90, 12, 40, 7, 64, 25, 18, 33})
    docs.push_back(pic_test::random_tokens(rng, n, vocab));
  docs.push_back(docs[2]);
  return docs;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

TEST(Distributed, WarmupAcrossRanksWritesTheStoreOneProcessWrites) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const auto docs = corpus(model.config().vocab_size);
  hypic::cluster::WarmupOptions opt;
  opt.junction.width = 4;
  opt.cost = hypic::cluster::CostModel(0.0, 1.0, 0.0);
  const Communicator comm = Communicator::world().duplicate();
  if (comm.rank() != 0) {
    hypic::cluster::warmup_across_ranks(comm.get(), model, fp, {}, nullptr, opt);
    return;
  }
  const fs::path dir = scratch("warmup");
  SegmentStore one = new_store(dir / "one.h5", fp, hypic::DType::F32);
  const auto r1 = hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, docs, &one, opt);
  SegmentStore many = new_store(dir / "many.h5", fp, hypic::DType::F32);
  // Half the corpus is there already: those entries are skipped, the rest computed.
  const std::vector<std::vector<int32_t>> half(docs.begin(), docs.begin() + 4);
  hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, half, &many, opt);
  const auto rn = hypic::cluster::warmup_across_ranks(comm.get(), model, fp, docs, &many, opt);
  EXPECT_EQ(r1.computed, 8u);
  EXPECT_EQ(r1.present, 1u);  // the repeated document
  EXPECT_EQ(rn.computed, 4u);
  EXPECT_EQ(rn.present, 5u);
  EXPECT_EQ(rn.samples.size(), 4u);

  auto keys1 = one.keys(), keysn = many.keys();
  std::sort(keys1.begin(), keys1.end());
  std::sort(keysn.begin(), keysn.end());
  ASSERT_EQ(keys1, keysn);
  for (const std::string& k : keys1) {
    const auto a = one.get(k), b = many.get(k);
    ASSERT_TRUE(a && b) << k;
    EXPECT_EQ(a->n_tokens, b->n_tokens);
    ASSERT_EQ(a->arrays.size(), b->arrays.size()) << k;
    for (const auto& [name, t] : a->arrays) {
      ASSERT_TRUE(b->arrays.count(name)) << name;
      expect_same_bits(t.to_vector(), b->arrays.at(name).to_vector(), k + " " + name);
    }
  }
  one.close();
  many.close();
  fs::remove_all(dir);
}

// The same path on every rank (rank 0 chose it).
std::string broadcast_text(MPI_Comm comm, std::string text) {
  int n = static_cast<int>(text.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  text.resize(static_cast<size_t>(n));
  MPI_Bcast(text.data(), n, MPI_CHAR, 0, comm);
  return text;
}

void expect_same_entries(SegmentStore& a, SegmentStore& b) {
  auto ka = a.keys(), kb = b.keys();
  std::sort(ka.begin(), ka.end());
  std::sort(kb.begin(), kb.end());
  ASSERT_EQ(ka, kb);
  for (const std::string& k : ka) {
    const auto x = a.get(k), y = b.get(k);
    ASSERT_TRUE(x && y) << k;
    EXPECT_EQ(x->n_tokens, y->n_tokens);
    ASSERT_EQ(x->arrays.size(), y->arrays.size()) << k;
    for (const auto& [name, t] : x->arrays) {
      ASSERT_TRUE(y->arrays.count(name)) << name;
      expect_same_bits(t.to_vector(), y->arrays.at(name).to_vector(), k + " " + name);
    }
  }
}

// Each worker writes its own shard; rank 0 gets receipts only. The logical store (the store
// file and the shards its manifest names) reads as the store one process writes; a rerun
// resumes shard by shard; a damaged shard is moved aside and its entries recomputed.
TEST(Distributed, ShardedWarmupReadsAsTheStoreOneProcessWritesResumesAndRecomputesADamagedShard) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const auto docs = corpus(model.config().vocab_size);
  const Communicator comm = Communicator::world().duplicate();
  const int ranks = comm.size();
  fs::path dir;
  if (comm.rank() == 0) dir = scratch("sharded");
  const std::string many_path = broadcast_text(comm.get(), (dir / "many.h5").string());
  hypic::cluster::WarmupOptions opt;
  opt.junction.width = 4;
  opt.cost = hypic::cluster::CostModel(0.0, 1.0, 0.0);
  opt.writers = hypic::cluster::Writers::kShards;
  opt.store_path = many_path;
  std::vector<std::string> notes;
  opt.note = [&notes](const std::string& line) { notes.push_back(line); };
  if (comm.rank() != 0) {
    for (int run = 0; run < 3; ++run)
      hypic::cluster::warmup_across_ranks(comm.get(), model, fp, {}, nullptr, opt);
    return;
  }
  SegmentStore one = new_store(dir / "one.h5", fp, hypic::DType::F32);
  hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, docs, &one, opt);

  // 1. The first half is in the store file already; the rest goes into the shards.
  SegmentStore many = new_store(many_path, fp, hypic::DType::F32);
  const std::vector<std::vector<int32_t>> half(docs.begin(), docs.begin() + 4);
  hypic::cluster::WarmupOptions single = opt;
  single.writers = hypic::cluster::Writers::kRank0;
  hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, half, &many, single);
  const auto r1 = hypic::cluster::warmup_across_ranks(comm.get(), model, fp, docs, &many, opt);
  EXPECT_EQ(r1.computed, 4u);
  EXPECT_EQ(r1.present, 5u);
  EXPECT_EQ(r1.writers, ranks == 1 ? 1 : ranks - 1);
  EXPECT_EQ(many.size(), one.size());
  expect_same_entries(one, many);
  if (ranks > 1) {
    EXPECT_EQ(many.shard_paths().size(), static_cast<size_t>(ranks - 1));
    EXPECT_TRUE(many.shard_problems().empty());
    // Rank 0 put nothing into its own file: every new entry is in a shard.
    uint64_t in_shards = 0;
    for (const std::string& shard : many.shard_paths())
      in_shards += SegmentStore::open_any(shard, hypic::store::OpenMode::kRead).size();
    EXPECT_EQ(in_shards, 4u);
  }
  {  // A reader opened afresh sees the same logical store and verifies it.
    SegmentStore reader = SegmentStore::open_any(many_path, hypic::store::OpenMode::kRead);
    expect_same_entries(one, reader);
    const hypic::store::VerifyReport v = reader.verify();
    EXPECT_TRUE(v.ok()) << v.first_problem();
    EXPECT_EQ(v.entries_valid, one.size());
  }

  // 2. A rerun resumes: nothing left to compute.
  const auto r2 = hypic::cluster::warmup_across_ranks(comm.get(), model, fp, docs, &many, opt);
  EXPECT_EQ(r2.computed, 0u);
  EXPECT_EQ(r2.present, docs.size());

  // 3. A damaged shard (its header overwritten) is named, moved aside, and what it held is
  // computed again.
  uint64_t lost = 0;
  std::string damaged;
  for (const std::string& shard : many.shard_paths()) {
    const uint64_t n = SegmentStore::open_any(shard, hypic::store::OpenMode::kRead).size();
    if (n > 0 && damaged.empty()) {
      damaged = shard;
      lost = n;
    }
  }
  many.close();
  if (!damaged.empty()) {
    std::FILE* f = std::fopen(damaged.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const std::string junk(4096, 'x');
    ASSERT_EQ(std::fwrite(junk.data(), 1, junk.size(), f), junk.size());
    std::fclose(f);
  }
  many = SegmentStore::open_any(many_path, hypic::store::OpenMode::kWrite);
  EXPECT_EQ(many.shard_problems().size(), damaged.empty() ? 0u : 1u);
  notes.clear();
  const auto r3 = hypic::cluster::warmup_across_ranks(comm.get(), model, fp, docs, &many, opt);
  EXPECT_EQ(r3.computed, lost);
  if (!damaged.empty()) {
    ASSERT_EQ(r3.moved_shards.size(), 1u);
    EXPECT_TRUE(fs::exists(r3.moved_shards[0]));
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("shard " + damaged + " is damaged"), std::string::npos) << notes[0];
  }
  EXPECT_TRUE(many.shard_problems().empty());
  expect_same_entries(one, many);
  EXPECT_TRUE(many.verify().ok());
  one.close();
  many.close();
  fs::remove_all(dir);
}

// pic mode, junction 4, first-token logits kept for the bitwise comparisons.
hypic::pic::EngineOptions pic_options() {
  hypic::pic::EngineOptions eo;
  eo.mode = hypic::pic::Mode::Pic;
  eo.junction.width = 4;
  eo.keep_first_logits = true;
  return eo;
}

TEST(Distributed, ServeAnswersAndLogitsDoNotDependOnTheNumberOfRanks) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const Communicator comm = Communicator::world().duplicate();
  if (comm.rank() != 0) {
    hypic::cluster::run_worker(comm.get(), model, eo.junction);
    return;
  }
  const int vocab = model.config().vocab_size;
  const auto docs = corpus(vocab);
  std::mt19937 rng(3);
  std::vector<hypic::pic::Query> queries;
  for (int q = 0; q < 3; ++q) {
    hypic::pic::Query query;
    query.id = "q" + std::to_string(q);
    if (q == 1) query.prefix = pic_test::random_tokens(rng, 5, vocab);
    for (int s = 0; s < 4; ++s)
      query.segments.push_back(docs[static_cast<size_t>((q * 3 + s) % 9)]);
    query.question = pic_test::random_tokens(rng, 6, vocab);
    query.max_new_tokens = 4;
    queries.push_back(query);
  }
  const fs::path dir = scratch("serve");
  SegmentStore one = new_store(dir / "one.h5", fp, hypic::DType::BF16);
  SegmentStore many = new_store(dir / "many.h5", fp, hypic::DType::BF16);
  Engine reference(model, fp, eo, &one);
  Engine spread(model, fp, eo, &many);
  hypic::cluster::RemoteColdSource cold(comm.get(), model,
                                        hypic::cluster::CostModel(0.0, 1.0, 0.0));
  spread.set_cold_source(&cold);
  for (const auto& query : queries) {
    const auto a = reference.run(query);
    const auto b = spread.run(query);
    EXPECT_EQ(a.answer, b.answer) << query.id;
    expect_same_bits(a.first_logits, b.first_logits, query.id);
    EXPECT_EQ(a.cold, b.cold) << query.id;
    EXPECT_EQ(a.hits_memory + a.hits_store, b.hits_memory + b.hits_store) << query.id;
  }
  EXPECT_EQ(one.size(), many.size());
  hypic::cluster::shutdown_workers(comm.get());
  one.close();
  many.close();
  fs::remove_all(dir);
}

TEST(Distributed, RankZeroReadsTheNextQuerysHitsWhileWorkersComputeWithoutChangingResults) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const Communicator comm = Communicator::world().duplicate();
  if (comm.rank() != 0) {
    // Slow workers: rank 0 surely waits, and does its idle work meanwhile.
    setenv("HYPIC_DEBUG_WORKER_DELAY_MS", "100", 1);
    hypic::cluster::run_worker(comm.get(), model, eo.junction);
    unsetenv("HYPIC_DEBUG_WORKER_DELAY_MS");
    return;
  }
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> docs;
  for (int n : {30, 11, 52, 19, 27, 8, 44}) docs.push_back(pic_test::random_tokens(rng, n, vocab));
  // q0: three cold documents; q1: four documents already stored (and one of q0's).
  hypic::pic::Query q0, q1;
  q0.id = "q0";
  q0.segments = {docs[4], docs[5], docs[6]};
  q1.id = "q1";
  q1.segments = {docs[0], docs[1], docs[6], docs[2], docs[3]};
  for (auto* q : {&q0, &q1}) {
    q->question = pic_test::random_tokens(rng, 5, vocab);
    q->max_new_tokens = 3;
  }
  const fs::path dir = scratch("prefetch");
  SegmentStore one = new_store(dir / "one.h5", fp, hypic::DType::BF16);
  SegmentStore many = new_store(dir / "many.h5", fp, hypic::DType::BF16);
  hypic::cluster::WarmupOptions wo;
  wo.junction = eo.junction;
  wo.cost = hypic::cluster::CostModel(0.0, 1.0, 0.0);
  const std::vector<std::vector<int32_t>> stored(docs.begin(), docs.begin() + 4);
  hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, stored, &one, wo);
  hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, stored, &many, wo);

  Engine reference(model, fp, eo, &one);
  Engine spread(model, fp, eo, &many);
  hypic::cluster::RemoteColdSource cold(comm.get(), model,
                                        hypic::cluster::CostModel(0.0, 1.0, 0.0));
  spread.set_cold_source(&cold);
  cold.set_idle_work([&spread] { return spread.prefetch_one(); });
  spread.queue_prefetch(q1);  // its four stored documents, not docs[6] (not in the store yet)
  std::vector<hypic::pic::QueryResult> a, b;
  for (const auto* q : {&q0, &q1}) {
    a.push_back(reference.run(*q));
    b.push_back(spread.run(*q));
    EXPECT_EQ(a.back().answer, b.back().answer) << q->id;
    expect_same_bits(a.back().first_logits, b.back().first_logits, q->id);
  }
  EXPECT_EQ(b[0].cold, 3);
  EXPECT_EQ(a[1].hits_store, 4);   // read when q1 is routed
  EXPECT_EQ(a[1].hits_memory, 1);  // docs[6], computed for q0
  if (comm.size() > 1) {
    // Read while the workers computed q0: q1 finds all five in memory.
    EXPECT_GT(cold.idle_calls(), 0u);
    EXPECT_EQ(spread.prefetched(), 4u);
    EXPECT_EQ(b[1].hits_store, 0);
    EXPECT_EQ(b[1].hits_memory, 5);
  } else {
    // One rank computes in place and never waits: nothing is read ahead.
    EXPECT_EQ(spread.prefetched(), 0u);
    EXPECT_EQ(b[1].hits_store, 4);
  }
  // Queued explicitly and drained, the same holds in one process.
  Engine fresh(model, fp, eo, &one);
  fresh.queue_prefetch(q1);
  while (fresh.prefetch_one()) {
  }
  EXPECT_EQ(fresh.prefetched(), 5u);  // docs[6] is in this store now too
  const auto c = fresh.run(q1);
  EXPECT_EQ(c.hits_store, 0);
  EXPECT_EQ(c.hits_memory, 5);
  EXPECT_EQ(c.answer, a[1].answer);
  expect_same_bits(c.first_logits, a[1].first_logits, "prefetched q1");

  hypic::cluster::shutdown_workers(comm.get());
  one.close();
  many.close();
  fs::remove_all(dir);
}

// Damages the stored values of `key` in the file of `store` that holds it (one byte flipped in
// the middle of its largest array, found by its bf16 bytes): its checksum then fails on read.
void damage_entry(SegmentStore& store, const std::string& key) {
  const std::string file = store.holder(key);
  ASSERT_FALSE(file.empty()) << key;
  const auto e = store.get(key);
  ASSERT_TRUE(e.has_value());
  const hypic::Tensor* big = nullptr;
  for (const auto& [name, t] : e->arrays)
    if (big == nullptr || t.numel() > big->numel()) big = &t;
  ASSERT_GE(big->numel(), 64);
  std::string pattern(32, '\0');
  hypic::store::encode(hypic::DType::BF16, big->data() + big->numel() / 2, 16, pattern.data());
  std::string bytes;
  {
    std::FILE* f = std::fopen(file.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
    std::fclose(f);
  }
  const size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.rfind(pattern), at);  // one place only
  std::FILE* f = std::fopen(file.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, static_cast<long>(at + 3), SEEK_SET);
  const char flipped = static_cast<char>(bytes[at + 3] ^ 0x40);
  std::fwrite(&flipped, 1, 1, f);
  std::fclose(f);
}

// A warm-up in which every worker writes its own shard of a store in a fresh folder of rank 0's
// (`tag` names it), with the engine's junction and no cost model.
hypic::cluster::WarmupOptions sharded_warmup(const Communicator& comm,
                                             const hypic::pic::EngineOptions& eo,
                                             const std::string& tag) {
  fs::path dir;
  if (comm.rank() == 0) dir = scratch(tag);
  hypic::cluster::WarmupOptions wo;
  wo.junction = eo.junction;
  wo.cost = hypic::cluster::CostModel(0.0, 1.0, 0.0);
  wo.writers = hypic::cluster::Writers::kShards;
  wo.store_path = broadcast_text(comm.get(), (dir / "s.h5").string());
  return wo;
}

// Serve's hit reads (--hit-reads owner, docs/cluster.md "Hits read where they live"): after a
// sharded warm-up, worker r reads the hits in the shard it wrote and sends them; rank 0 reads
// the store file and a shard whose writer rank is not in this job; a copy found damaged is
// computed by the worker that read it. Answers and first-token logits equal a one-process engine
// reading every hit itself, bit for bit.
TEST(Distributed, HitsReadWhereTheyLiveGiveWhatRankZeroReadingThemGives) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const int code = eo.junction.store_code();
  const Communicator comm = Communicator::world().duplicate();
  const int ranks = comm.size();
  const hypic::cluster::WarmupOptions wo = sharded_warmup(comm, eo, "hitreads");
  const std::string& path = wo.store_path;
  if (comm.rank() != 0) {
    hypic::cluster::warmup_across_ranks(comm.get(), model, fp, {}, nullptr, wo);
    const auto shard = hypic::cluster::open_hit_shard(comm.get(), fp, code);
    EXPECT_TRUE(shard != nullptr);
    hypic::cluster::run_worker(comm.get(), model, eo.junction, nullptr, 0, nullptr,
                               hypic::DType::BF16, shard.get());
    return;
  }
  const int vocab = model.config().vocab_size;
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> docs;
  for (int n : {30, 11, 52, 19, 27, 8, 44, 23})
    docs.push_back(pic_test::random_tokens(rng, n, vocab));
  SegmentStore many = new_store(path, fp, hypic::DType::BF16);
  const std::vector<std::vector<int32_t>> warm(docs.begin(), docs.begin() + 6);
  hypic::cluster::warmup_across_ranks(comm.get(), model, fp, warm, &many, wo);
  hypic::cluster::HitReadPlan plan;
  if (ranks > 1) {
    // docs[5]'s copy damaged in its shard (with one rank the store file, open for writing in
    // this process, would serve it from HDF5's cache).
    damage_entry(many,
                 hypic::store::entry_key(
                     fp, docs[5], eo.junction.tokens_for(static_cast<int64_t>(docs[5].size()))));
    // A shard from a larger warm-up: its writer rank is not in this job, so rank 0 reads it.
    const std::string extra = hypic::store::shard_path(path, ranks);
    SegmentStore e = new_store(extra, fp, hypic::DType::BF16);
    hypic::cluster::WarmupOptions single = wo;
    single.writers = hypic::cluster::Writers::kRank0;
    hypic::cluster::warmup_across_ranks(MPI_COMM_SELF, model, fp, {docs[6]}, &e, single);
    e.close();
    hypic::store::add_to_shard_manifest(path, {extra});
    many.reload_shards();
    plan = hypic::cluster::plan_hit_reads(comm.get(), hypic::cluster::HitReads::kOwner, many);
    EXPECT_EQ(plan.shard_reader.size(), static_cast<size_t>(ranks - 1));
    EXPECT_EQ(plan.shard_reader.count(hypic::store::shard_path(path, 1)), 1u);
    EXPECT_TRUE(plan.remote_keys.empty());  // rank 0 opens every shard here
    ASSERT_EQ(plan.notes.size(), 1u);
    EXPECT_NE(plan.notes[0].find("shard " + extra + ": its writer, rank " + std::to_string(ranks) +
                                 ", is not in this job of " + std::to_string(ranks) +
                                 " ranks; rank 0 reads its hits"),
              std::string::npos)
        << plan.notes[0];
  }
  SegmentStore ref = SegmentStore::open(path, fp, code, hypic::store::OpenMode::kRead);
  Engine reference(model, fp, eo, &ref);  // one process, every hit read here
  Engine spread(model, fp, eo, &many);
  hypic::cluster::RemoteColdSource cold(comm.get(), model,
                                        hypic::cluster::CostModel(0.0, 1.0, 0.0));
  spread.set_cold_source(&cold);
  cold.set_hit_reads(plan, &many);
  spread.set_remote_hits([&cold](const std::string& key) { return cold.hit_reader(key) > 0; });
  // q0: four hits in the shards; q1: a hit, the extra shard's, a cold one, a repeat;
  // q2: the cold one of q1 (now in memory), a hit, a hit of q0 (in memory).
  std::vector<hypic::pic::Query> qs(3);
  qs[0].segments = {docs[0], docs[1], docs[2], docs[3]};
  qs[1].segments = {docs[4], docs[6], docs[7], docs[4]};
  qs[2].segments = {docs[7], docs[5], docs[0]};
  int by_workers = 0, store_hits = 0, damaged = 0;
  for (size_t i = 0; i < qs.size(); ++i) {
    qs[i].id = "q" + std::to_string(i);
    qs[i].question = pic_test::random_tokens(rng, 5, vocab);
    qs[i].max_new_tokens = 3;
    const auto a = reference.run(qs[i]);
    const auto b = spread.run(qs[i]);
    EXPECT_EQ(a.answer, b.answer) << qs[i].id;
    expect_same_bits(a.first_logits, b.first_logits, qs[i].id);
    EXPECT_EQ(a.cold, b.cold) << qs[i].id;
    EXPECT_EQ(a.hits_store, b.hits_store) << qs[i].id;
    EXPECT_EQ(a.hits_memory, b.hits_memory) << qs[i].id;
    EXPECT_EQ(a.damaged, b.damaged) << qs[i].id;
    damaged += b.damaged;
    by_workers += b.hits_read_by_workers;
    store_hits += b.hits_store;
    if (b.hits_read_by_workers == 0)
      EXPECT_EQ(b.hit_bytes_from_workers, 0u);
    else
      EXPECT_GT(b.hit_bytes_from_workers, 0u);
  }
  // docs 0-4 come from the workers' shards; docs[6] from the extra shard on rank 0; docs[5]'s
  // damaged copy was computed again.
  EXPECT_EQ(by_workers, ranks > 1 ? 5 : 0);
  EXPECT_EQ(store_hits, 6);
  EXPECT_EQ(damaged, ranks > 1 ? 1 : 0);
  hypic::cluster::shutdown_workers(comm.get());
  ref.close();
  many.close();
  if (comm.rank() == 0) fs::remove_all(fs::path(path).parent_path());
}

// A worker that cannot read the shard it is asked to read is named with its rank, host and the
// shard, in one line (rank 0 throws it); with --hit-reads auto the line is a warning, and the
// shard's entries are computed as cold ones.
TEST(Distributed, AShardItsWorkerCannotReadIsNamedWithRankHostAndShard) {
  const Communicator comm = Communicator::world().duplicate();
  if (comm.size() == 1) GTEST_SKIP() << "needs a worker";
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const int code = eo.junction.store_code();
  const hypic::cluster::WarmupOptions wo = sharded_warmup(comm, eo, "hitfault");
  const std::string& path = wo.store_path;
  if (comm.rank() != 0) {
    hypic::cluster::warmup_across_ranks(comm.get(), model, fp, {}, nullptr, wo);
    // Asked in owner mode (every shard), then in auto mode (only the one rank 0 cannot open).
    EXPECT_EQ(hypic::cluster::open_hit_shard(comm.get(), fp, code) != nullptr, comm.rank() != 1);
    EXPECT_EQ(hypic::cluster::open_hit_shard(comm.get(), fp, code), nullptr);
    return;
  }
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> docs;
  for (int n : {30, 11, 52, 19, 27, 8})
    docs.push_back(pic_test::random_tokens(rng, n, model.config().vocab_size));
  SegmentStore many = new_store(path, fp, hypic::DType::BF16);
  hypic::cluster::warmup_across_ranks(comm.get(), model, fp, docs, &many, wo);
  const std::string shard = hypic::store::shard_path(path, 1);
  {
    std::FILE* f = std::fopen(shard.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const std::string junk(4096, 'x');
    ASSERT_EQ(std::fwrite(junk.data(), 1, junk.size(), f), junk.size());
    std::fclose(f);
  }
  many.reload_shards();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string named = "worker rank 1 (pid ";
  const std::string where = " on " + std::string(host) + ") cannot read its shard " + shard + ": ";
  try {
    hypic::cluster::plan_hit_reads(comm.get(), hypic::cluster::HitReads::kOwner, many);
    ADD_FAILURE() << "a shard its worker cannot read was accepted";
  } catch (const hypic::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(named, 0), 0u) << what;
    EXPECT_NE(what.find(where), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  const auto plan =
      hypic::cluster::plan_hit_reads(comm.get(), hypic::cluster::HitReads::kAuto, many);
  EXPECT_EQ(plan.shard_reader.count(shard), 0u);
  EXPECT_TRUE(plan.remote_keys.empty());
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_EQ(plan.notes[0].rfind("warning: " + named, 0), 0u) << plan.notes[0];
  EXPECT_NE(plan.notes[0].find("; its hits are computed as cold segments"), std::string::npos);
  many.close();
  if (comm.rank() == 0) fs::remove_all(fs::path(path).parent_path());
}

}  // namespace

namespace {

// Bytes rank 0 copies or converts per byte of cold entry (f32 in memory) on the way from the
// cold source to the memory tier and a bf16 store: the number docs/engine.md reports.
TEST(Distributed, RankZeroCopiesOfAColdEntry) {
  auto model = pic_test::remembering_tiny_model("qwen3_5", 7);
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const Communicator comm = Communicator::world().duplicate();
  if (comm.rank() != 0) {
    hypic::cluster::run_worker(comm.get(), model, eo.junction);
    return;
  }
  const auto docs = corpus(model.config().vocab_size);
  hypic::pic::Query q;
  q.id = "cold";
  q.segments = {docs[0], docs[1], docs[2], docs[4]};
  q.question = {1, 2, 3};
  q.max_new_tokens = 1;
  const fs::path dir = scratch("copies");
  SegmentStore st = new_store(dir / "s.h5", fp, hypic::DType::BF16);
  Engine engine(model, fp, eo, &st);
  hypic::cluster::RemoteColdSource cold(comm.get(), model,
                                        hypic::cluster::CostModel(0.0, 1.0, 0.0));
  engine.set_cold_source(&cold);
  const auto r = engine.run(q);
  ASSERT_EQ(r.cold, 4);
  ASSERT_GT(r.cold_entry_bytes, 0u);
  const double per_byte =
      static_cast<double>(r.cold_bytes_copied) / static_cast<double>(r.cold_entry_bytes);
  std::printf(
      "[ copies   ] %d rank(s), bf16 store: %.2f bytes copied on rank 0 per byte of cold "
      "entry (%llu of %llu)\n",
      comm.size(), per_byte, static_cast<unsigned long long>(r.cold_bytes_copied),
      static_cast<unsigned long long>(r.cold_entry_bytes));
  // Rounded in place once and written to the store from the entry's buffers: 4 B (decoded
  // message) + 0.5 B (bf16 encoding) per 4 B of entry from a worker, and without the
  // message in one process (docs/engine.md; before: 4.00 and 3.00).
  // (+ the worker's 4-byte compute-time array per entry, decoded with the message).
  // On a device (HYPIC_TEST_DEVICE) the memory tier's upload adds one copy per byte: into the
  // page-locked staging buffers (pic::EntryUploader).
  const double staging = model.backend().device() == hypic::Device::Host ? 0.0 : 1.0;
  EXPECT_LE(per_byte, (comm.size() > 1 ? 2.5 : 1.5) + staging + 0.01);
  hypic::cluster::shutdown_workers(comm.get());
  st.close();
  fs::remove_all(dir);
}

// The NCCL path on any machine (issue #14): every rank computes on the stand-in device, the
// workers compute their entries resident and send them through a device link (an MPI stand-in
// for NCCL here), and rank 0 receives them into device memory and splices them from there: the
// answers, first-token logits and the bf16 store equal one process's bit for bit, and no cold
// entry is uploaded on rank 0 (none passes through its host memory to the memory tier).
TEST(Distributed, EntriesThroughADeviceLinkGiveWhatOneProcessGives) {
  const auto host = pic_test::remembering_tiny_host_model("qwen3_5", 7);
  hypic::model::Model model(host.config(),
                            hypic::model::to_backend(host.weights(), pic_test::fake_device()),
                            pic_test::fake_device());
  const std::string fp = "test-fingerprint";
  const hypic::pic::EngineOptions eo = pic_options();
  const Communicator comm = Communicator::world().duplicate();
  pic_test::MpiDeviceLink link(comm.get());
  if (comm.rank() != 0) {
    hypic::cluster::run_worker(comm.get(), model, eo.junction, &link);
    EXPECT_GT(link.bytes_sent, 0u) << "rank " << comm.rank() << " sent no entry";
    return;
  }
  const int vocab = model.config().vocab_size;
  const auto docs = corpus(vocab);
  std::mt19937 rng(4);
  std::vector<hypic::pic::Query> queries;
  for (int q = 0; q < 2; ++q) {
    hypic::pic::Query query;
    query.id = "q" + std::to_string(q);
    if (q == 1) query.prefix = pic_test::random_tokens(rng, 5, vocab);
    for (int s = 0; s < 5; ++s)
      query.segments.push_back(docs[static_cast<size_t>((q * 4 + s) % 9)]);
    query.question = pic_test::random_tokens(rng, 6, vocab);
    query.max_new_tokens = 3;
    queries.push_back(query);
  }
  const fs::path dir = scratch("devlink");
  SegmentStore one = new_store(dir / "one.h5", fp, hypic::DType::BF16);
  SegmentStore many = new_store(dir / "many.h5", fp, hypic::DType::BF16);
  Engine reference(model, fp, eo, &one);
  Engine spread(model, fp, eo, &many);
  hypic::cluster::RemoteColdSource cold(comm.get(), model, hypic::cluster::CostModel(0.0, 1.0, 0.0),
                                        "rerun to resume", &link);
  spread.set_cold_source(&cold);
  int cold_total = 0;
  for (const auto& query : queries) {
    const auto a = reference.run(query);
    const auto b = spread.run(query);
    EXPECT_EQ(a.answer, b.answer) << query.id;
    expect_same_bits(a.first_logits, b.first_logits, query.id);
    EXPECT_EQ(a.cold, b.cold) << query.id;
    cold_total += b.cold;
  }
  EXPECT_GT(cold_total, 0);
  EXPECT_EQ(spread.entries_uploaded(), 0u);  // resident as they arrived (or were computed)
  if (comm.size() > 1) {
    EXPECT_EQ(link.receives, static_cast<uint64_t>(cold_total));
    EXPECT_GT(link.bytes_received, 0u);
  } else {
    EXPECT_EQ(link.receives, 0u);  // one rank: computed in place, on its device
  }
  ASSERT_EQ(one.size(), many.size());
  for (const std::string& k : one.keys()) {
    const auto a = one.get(k), b = many.get(k);
    ASSERT_TRUE(a && b) << k;
    for (const auto& [name, t] : a->arrays)
      expect_same_bits(t.to_vector(), b->arrays.at(name).to_vector(), k + " " + name);
  }
  hypic::cluster::shutdown_workers(comm.get());
  one.close();
  many.close();
  fs::remove_all(dir);
}

}  // namespace
