// The five caching modes against full recompute on a random tiny model: fidelity ordering
// (pic W=8 < pic W=0 ≪ pic-addition), prefix = full when the prefix matches, cold fill
// write-back and tiered hits, and the cases where the modes must agree.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/engine.hpp"
#include "pic/fidelity.hpp"
#include "pic/fingerprint.hpp"
#include "pic_test_util.hpp"

namespace {
namespace pic_modes_test {
namespace fs = std::filesystem;
using hypic::model::Model;
using hypic::pic::Engine;
using hypic::pic::EngineOptions;
using hypic::pic::Mode;
using hypic::pic::Query;
using hypic::pic::QueryResult;

struct Fixture {
  explicit Fixture(const std::string& arch = "qwen3_5")
      : cfg(hypic::model::preset_config(hypic::model::parse_arch(arch), "tiny")),
        model(pic_test::remembering_tiny_model(arch, 21)),
        fp(hypic::pic::model_fingerprint(model.config(), model.weights())) {}
  hypic::model::ModelConfig cfg;
  Model model;
  std::string fp;
};

// The fidelity tests run on every registered architecture.
class PicModesPerArch : public ::testing::TestWithParam<std::string> {};

using pic_test::random_tokens;

EngineOptions options(Mode mode, int junction, bool keep = true) {
  EngineOptions o;
  o.mode = mode;
  o.junction.width = junction;
  o.keep_first_logits = o.keep_last_hidden = keep;
  return o;
}

struct Distance {
  double kl = 0, hidden = 0;
};

Distance distance(const QueryResult& full, const QueryResult& r) {
  return {hypic::pic::kl_divergence_logits(full.first_logits.data(), r.first_logits.data(),
                                           static_cast<int64_t>(full.first_logits.size())),
          hypic::pic::relative_l2(r.last_hidden.data(), full.last_hidden.data(),
                                  full.last_hidden.size())};
}

TEST_P(PicModesPerArch, JunctionWindowsHelpAndTransitionsMatter) {
  Fixture f(GetParam());
  std::mt19937 rng(4);
  const int V = f.cfg.vocab_size;
  Engine full(f.model, f.fp, options(Mode::Full, 8));
  Engine w8(f.model, f.fp, options(Mode::Pic, 8));
  Engine w0(f.model, f.fp, options(Mode::Pic, 0));
  Engine add(f.model, f.fp, options(Mode::PicAddition, 8));
  Distance d8, d0, da;
  const int queries = 8;
  for (int q = 0; q < queries; ++q) {
    Query query;
    query.id = "q" + std::to_string(q);
    std::uniform_int_distribution<int> len(24, 96);
    for (int s = 0; s < 4; ++s) query.segments.push_back(random_tokens(rng, len(rng), V));
    query.question = random_tokens(rng, 8, V);
    query.max_new_tokens = 4;
    const QueryResult ref = full.run(query);
    for (auto [engine, acc] : {std::pair{&w8, &d8}, std::pair{&w0, &d0}, std::pair{&add, &da}}) {
      const Distance d = distance(ref, engine->run(query));
      acc->kl += d.kl / queries;
      acc->hidden += d.hidden / queries;
    }
  }
  std::printf(
      "[ modes    ] %s: mean over %d queries of 4 segments: KL(full||mode) first token / "
      "last hidden rel. error:\n"
      "[ modes    ]   pic W=8 %.3e / %.3e, pic W=0 %.3e / %.3e, pic-addition W=8 "
      "%.3e / %.3e\n",
      GetParam().c_str(), queries, d8.kl, d8.hidden, d0.kl, d0.hidden, da.kl, da.hidden);
  EXPECT_LT(d8.kl, d0.kl);
  EXPECT_LT(d8.hidden, d0.hidden);
  EXPECT_LT(3 * d0.kl, da.kl);
  EXPECT_LT(2 * d0.hidden, da.hidden);
}

TEST_P(PicModesPerArch, PrefixAgreesWithFullWhenThePrefixMatches) {
  Fixture f(GetParam());
  std::mt19937 rng(8);
  const int V = f.cfg.vocab_size;
  const auto pre = random_tokens(rng, 6, V);
  const auto s1 = random_tokens(rng, 50, V), s2 = random_tokens(rng, 70, V),
             s3 = random_tokens(rng, 30, V), s4 = random_tokens(rng, 40, V);
  Engine full(f.model, f.fp, options(Mode::Full, 8));
  Engine prefix(f.model, f.fp, options(Mode::Prefix, 8));
  Query a{"a", pre, {s1, s2, s3}, random_tokens(rng, 5, V), 6};
  Query b{"b", pre, {s1, s2, s4}, random_tokens(rng, 5, V), 6};
  const QueryResult ra = prefix.run(a);
  EXPECT_EQ(ra.prefix_units_reused, 0);
  const QueryResult rb = prefix.run(b);
  EXPECT_EQ(rb.prefix_units_reused, 3);  // prompt prefix, s1, s2
  EXPECT_EQ(rb.tokens_recomputed, 40 + 5);
  for (const auto& [q, r] : {std::pair{&a, &ra}, std::pair{&b, &rb}}) {
    const QueryResult ref = full.run(*q);
    EXPECT_EQ(ref.answer, r->answer);
    const Distance d = distance(ref, *r);
    EXPECT_LE(d.kl, 1e-8) << q->id;
    EXPECT_LE(d.hidden, 1e-5) << q->id;
  }
  // The same prompt again: everything but the question comes from the snapshot.
  const QueryResult again = prefix.run(b);
  EXPECT_EQ(again.prefix_units_reused, 4);
  EXPECT_EQ(again.answer, rb.answer);
}

TEST(PicModes, ColdFillWritesBackAndTheNextQueryHits) {
  Fixture f;
  std::mt19937 rng(12);
  const int V = f.cfg.vocab_size;
  const fs::path path =
      fs::temp_directory_path() / ("hypic_modes_" + std::to_string(getpid()) + ".h5");
  Query q{"q",
          {},
          {random_tokens(rng, 40, V), random_tokens(rng, 60, V), random_tokens(rng, 5, V)},
          random_tokens(rng, 4, V),
          5};
  hypic::store::StoreOptions so;
  so.model_fingerprint = f.fp;
  so.junction = 8;
  so.dtype = hypic::DType::BF16;
  QueryResult cold, hot;
  {
    auto st = hypic::store::SegmentStore::create(path.string(), so);
    Engine e(f.model, f.fp, options(Mode::Pic, 8), &st);
    cold = e.run(q);
    EXPECT_EQ(cold.cold, 3);
    EXPECT_EQ(cold.cold_tokens, 105);
    EXPECT_EQ(st.size(), 3u);
    hot = e.run(q);
    EXPECT_EQ(hot.hits_memory, 3);
    EXPECT_EQ(hot.cold, 0);
  }
  auto st = hypic::store::SegmentStore::open(path.string(), f.fp, 8, hypic::store::OpenMode::kRead);
  Engine fresh(f.model, f.fp, options(Mode::Pic, 8), &st);
  const QueryResult warm = fresh.run(q);
  EXPECT_EQ(warm.hits_store, 3);
  EXPECT_EQ(warm.cold, 0);
  // A cold entry is rounded to the store's dtype before use: hits compose identically.
  EXPECT_EQ(cold.answer, warm.answer);
  EXPECT_EQ(cold.first_logits, warm.first_logits);
  EXPECT_EQ(hot.first_logits, warm.first_logits);
  // junction 8 + 8 + 4 (capped at n − 1) + question 4
  EXPECT_EQ(warm.tokens_recomputed, 8 + 8 + 4 + 4);
  st.close();
  fs::remove(path);
}

TEST(PicModes, DamagedStoreEntryIsReportedRecomputedAndReplaced) {
  // Bytes of one stored entry are flipped on disk: serving must notice (checksum), never
  // use it, recompute it as a cold fill, write the good entry back, and answer as before.
  Fixture f;
  std::mt19937 rng(31);
  const int V = f.cfg.vocab_size;
  const fs::path path =
      fs::temp_directory_path() / ("hypic_damage_" + std::to_string(getpid()) + ".h5");
  Query q{
      "q", {}, {random_tokens(rng, 50, V), random_tokens(rng, 70, V)}, random_tokens(rng, 4, V), 4};
  hypic::store::StoreOptions so;
  so.model_fingerprint = f.fp;
  so.junction = 8;
  so.dtype = hypic::DType::F32;  // payload bytes are the floats themselves
  QueryResult reference;
  std::string damaged_key;
  std::vector<float> payload;
  {
    auto st = hypic::store::SegmentStore::create(path.string(), so);
    Engine e(f.model, f.fp, options(Mode::Pic, 8), &st);
    reference = e.run(q);
    ASSERT_EQ(reference.cold, 2);
    damaged_key = st.key_for(q.segments[1]);
    const auto entry = st.get(damaged_key);
    ASSERT_TRUE(entry.has_value());
    payload = entry->arrays.begin()->second.to_vector();
  }
  // Find a 32-byte run of that entry's payload in the file and flip one bit in it.
  ASSERT_GE(payload.size(), 32u);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string needle(reinterpret_cast<const char*>(payload.data() + 16), 32);
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(at + 5));
    char c = bytes[at + 5] ^ 0x10;
    io.write(&c, 1);
  }
  {
    auto st =
        hypic::store::SegmentStore::open(path.string(), f.fp, 8, hypic::store::OpenMode::kWrite);
    Engine e(f.model, f.fp, options(Mode::Pic, 8), &st);
    const QueryResult r = e.run(q);
    EXPECT_EQ(r.damaged, 1);
    EXPECT_EQ(r.hits_store, 1);
    EXPECT_EQ(r.cold, 1);  // the damaged entry was recomputed, not used
    EXPECT_EQ(r.answer, reference.answer);
    EXPECT_EQ(r.first_logits, reference.first_logits);
  }
  auto st = hypic::store::SegmentStore::open(path.string(), f.fp, 8, hypic::store::OpenMode::kRead);
  EXPECT_TRUE(st.verify().ok());
  EXPECT_TRUE(st.contains(damaged_key));
  st.close();
  fs::remove(path);
}

TEST_P(PicModesPerArch, SingleSegmentPromptsAgreeAcrossModes) {
  // One segment at offset 0 from an empty cache: composition is exact in every layer, and
  // addition equals composition when there is no junction (the incoming state is zero).
  Fixture f(GetParam());
  std::mt19937 rng(2);
  const int V = f.cfg.vocab_size;
  const Query q{"one", {}, {random_tokens(rng, 90, V)}, random_tokens(rng, 6, V), 6};
  Engine full(f.model, f.fp, options(Mode::Full, 8));
  const QueryResult ref = full.run(q);
  for (auto [mode, w] : {std::pair{Mode::Prefix, 8}, std::pair{Mode::Pic, 8},
                         std::pair{Mode::Pic, 0}, std::pair{Mode::PicAddition, 0}}) {
    Engine e(f.model, f.fp, options(mode, w));
    const QueryResult r = e.run(q);
    const Distance d = distance(ref, r);
    EXPECT_EQ(r.answer, ref.answer) << hypic::pic::mode_name(mode) << " W=" << w;
    EXPECT_LE(d.kl, 1e-8) << hypic::pic::mode_name(mode) << " W=" << w;
    EXPECT_LE(d.hidden, 1e-5) << hypic::pic::mode_name(mode) << " W=" << w;
  }
}

TEST(PicModes, StateContributionIsLoggedAtEverySpliceAndChangesNothing) {
  Fixture f;
  std::mt19937 rng(9);
  const int V = f.cfg.vocab_size;
  Query q{"s", {}, {}, random_tokens(rng, 6, V), 3};
  for (int n : {40, 64, 52}) q.segments.push_back(random_tokens(rng, n, V));
  int linear = 0;
  for (int l = 0; l < f.cfg.num_hidden_layers; ++l)
    linear += f.cfg.layer_types[static_cast<size_t>(l)] == hypic::model::LayerKind::Linear;
  EngineOptions plain = options(Mode::Pic, 0), measured = plain;
  measured.measure_state_contribution = true;
  Engine a(f.model, f.fp, plain), b(f.model, f.fp, measured);
  const QueryResult ra = a.run(q), rb = b.run(q);
  EXPECT_TRUE(ra.state_shares.empty());
  EXPECT_EQ(ra.answer, rb.answer);  // measuring does not touch the composed state
  EXPECT_EQ(ra.first_logits, rb.first_logits);
  ASSERT_EQ(rb.state_shares.size(), static_cast<size_t>(3 * linear));
  for (const auto& sh : rb.state_shares) {
    EXPECT_EQ(f.cfg.layer_types[static_cast<size_t>(sh.layer)], hypic::model::LayerKind::Linear);
    if (sh.segment == 0) {
      EXPECT_EQ(sh.ratio, 0.0);  // no prefix, no window: nothing comes in
    } else {
      // A remembering model carries part of the previous segments' state across.
      EXPECT_GT(sh.ratio, 1e-3) << "segment " << sh.segment << " layer " << sh.layer;
      EXPECT_LT(sh.ratio, 10.0);
    }
  }
}

bool has_repeated_bigram(const std::vector<int32_t>& a) {
  for (size_t i = 0; i + 2 <= a.size(); ++i)
    for (size_t j = i + 1; j + 2 <= a.size(); ++j)
      if (a[i] == a[j] && a[i + 1] == a[j + 1]) return true;
  return false;
}

TEST(PicModes, NoRepeatNgramHoldsInEveryMode) {
  // A random model loops under greedy decoding; with Query::no_repeat_ngram = 2 no bigram of
  // the answer occurs twice, in full recompute as in the caching modes, and the first token,
  // which nothing can ban, stays the plain greedy one.
  Fixture f;
  std::mt19937 rng(4);
  const int V = f.cfg.vocab_size;
  Query q{"r", {}, {}, random_tokens(rng, 5, V), 48};
  for (int n : {30, 45}) q.segments.push_back(random_tokens(rng, n, V));
  for (auto [mode, w] : {std::pair{Mode::Full, 8}, std::pair{Mode::Prefix, 8},
                         std::pair{Mode::Pic, 8}, std::pair{Mode::PicAddition, 0}}) {
    Engine plain_engine(f.model, f.fp, options(mode, w));
    const QueryResult plain = plain_engine.run(q);
    Query nr = q;
    nr.no_repeat_ngram = 2;
    Engine e(f.model, f.fp, options(mode, w));
    const QueryResult r = e.run(nr);
    const std::string what = std::string(hypic::pic::mode_name(mode)) + " W=" + std::to_string(w);
    ASSERT_FALSE(r.answer.empty()) << what;
    EXPECT_TRUE(has_repeated_bigram(plain.answer)) << what << ": the plain answer must loop";
    EXPECT_FALSE(has_repeated_bigram(r.answer)) << what;
    EXPECT_EQ(r.answer.front(), plain.answer.front()) << what;
    EXPECT_EQ(r.first_logits, plain.first_logits) << what;
  }
}

TEST(PicModes, RefusesBadQueries) {
  Fixture f;
  Engine e(f.model, f.fp, options(Mode::Pic, 8));
  EXPECT_THROW(e.run(Query{"x", {}, {{1, 2}, {}}, {3}, 1}), hypic::Error);  // empty segment
  EXPECT_THROW(e.run(Query{"x", {}, {{1, 2}}, {}, 1}), hypic::Error);       // no question
  std::vector<int32_t> huge(static_cast<size_t>(f.cfg.max_position_embeddings) + 1, 1);
  EXPECT_THROW(e.run(Query{"x", {}, {huge}, {3}, 1}), hypic::Error);  // longer than context
}

std::vector<std::string> registered_architectures() {
  std::vector<std::string> names;
  for (const hypic::model::ArchSpec* a : hypic::model::architectures()) names.push_back(a->name());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Models, PicModesPerArch, ::testing::ValuesIn(registered_architectures()),
                         [](const auto& test_param) { return test_param.param; });

}  // namespace pic_modes_test
}  // namespace
