// Segment entries, composition and re-rotation against full recompute on a random tiny
// model (MATH.md §2-§5), the entry ↔ store round trip, and the engine's small parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "hypic/kernels/rope.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "pic/compose.hpp"
#include "pic/fidelity.hpp"
#include "pic/fingerprint.hpp"
#include "pic/junction.hpp"
#include "pic/lru_cache.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"
#include "store/segment_store.hpp"

namespace {
namespace pic_engine_test {
namespace fs = std::filesystem;
using hypic::Tensor;
using hypic::model::InferenceCache;
using hypic::model::LogitsMode;
using hypic::model::Model;
using hypic::pic::SegmentEntry;

using pic_test::random_tokens;

Model tiny_model(const std::string& arch = "qwen3_5", uint64_t seed = 7) {
  return pic_test::remembering_tiny_model(arch, seed);
}

// Caches may live on the test device (HYPIC_TEST_DEVICE): compared from host copies.
double rel(const Tensor& a, const Tensor& ref) {
  const std::vector<float> x = a.to_vector(), y = ref.to_vector();
  EXPECT_EQ(x.size(), y.size());
  return hypic::pic::relative_l2(x.data(), y.data(), std::min(x.size(), y.size()));
}

std::vector<SegmentEntry> entries_of(Model& m, const std::vector<std::vector<int32_t>>& segs,
                                     const hypic::pic::JunctionSpec& junction,
                                     hypic::DType dtype = hypic::DType::F32) {
  std::vector<SegmentEntry> out;
  for (const auto& s : segs) {
    out.push_back(hypic::pic::compute_entry(m, s, junction.tokens_for(int64_t(s.size()))));
    hypic::pic::round_to_dtype(out.back(), dtype);
  }
  return out;
}

// prefix, then the segments composed from their entries (all junction windows in one
// layer-by-layer pass: pic::compose_segments, the engine's path).
InferenceCache compose_entries(Model& m, const std::vector<int32_t>& prefix,
                               const std::vector<std::vector<int32_t>>& segs,
                               const std::vector<SegmentEntry>& entries, bool addition) {
  InferenceCache cache = m.new_cache();
  if (!prefix.empty()) m.prefill(prefix, cache, LogitsMode::Last);
  std::vector<hypic::pic::PlacedSegment> placed;
  for (size_t i = 0; i < segs.size(); ++i) placed.push_back({&segs[i], &entries[i]});
  hypic::pic::compose_segments(m, placed, addition, cache);
  return cache;
}

InferenceCache compose(Model& m, const std::vector<int32_t>& prefix,
                       const std::vector<std::vector<int32_t>>& segs, int w, bool addition,
                       hypic::DType dtype = hypic::DType::F32) {
  hypic::pic::JunctionSpec spec;
  spec.width = w;
  return compose_entries(m, prefix, segs, entries_of(m, segs, spec, dtype), addition);
}

// The reference: one segment after the other, its window prefilled through every layer,
// then its rest spliced into every layer (the engine's path before the windows were batched).
InferenceCache compose_per_segment(Model& m, const std::vector<int32_t>& prefix,
                                   const std::vector<std::vector<int32_t>>& segs,
                                   const std::vector<SegmentEntry>& entries, bool addition) {
  InferenceCache cache = m.new_cache();
  if (!prefix.empty()) m.prefill(prefix, cache, LogitsMode::Last);
  for (size_t i = 0; i < segs.size(); ++i) {
    const SegmentEntry& e = entries[i];
    const int64_t start = cache.n_tokens;
    if (e.junction > 0)
      m.prefill(std::vector<int32_t>(segs[i].begin(), segs[i].begin() + e.junction), cache,
                LogitsMode::None);
    for (size_t l = 0; l < cache.layers.size(); ++l)
      hypic::pic::splice_layer(m.backend(), m.config(), e, static_cast<int>(l), start, addition,
                               cache.layers[l]);
    cache.n_tokens += e.cached_tokens();
  }
  return cache;
}

InferenceCache recompute(Model& m, const std::vector<int32_t>& prefix,
                         const std::vector<std::vector<int32_t>>& segs) {
  std::vector<int32_t> all = prefix;
  for (const auto& s : segs) all.insert(all.end(), s.begin(), s.end());
  InferenceCache cache = m.new_cache();
  m.prefill(all, cache, LogitsMode::Last);
  return cache;
}

TEST(PicEngine, FirstLinearLayerComposedStateEqualsRecompute) {
  for (const hypic::model::ArchSpec* spec : hypic::model::architectures()) {
    const char* arch = spec->name();
    Model m = tiny_model(arch);
    std::mt19937 rng(11);
    const int V = m.config().vocab_size;
    const auto prefix = random_tokens(rng, 5, V);
    const std::vector<std::vector<int32_t>> segs = {
        random_tokens(rng, 40, V), random_tokens(rng, 150, V), random_tokens(rng, 9, V)};
    const InferenceCache full = recompute(m, prefix, segs);
    const InferenceCache w8 = compose(m, prefix, segs, 8, false);
    const InferenceCache w0 = compose(m, prefix, segs, 0, false);
    const InferenceCache bf16 = compose(m, prefix, segs, 8, false, hypic::DType::BF16);
    const InferenceCache f16 = compose(m, prefix, segs, 8, false, hypic::DType::F16);
    const double e8 = rel(w8.layers[0].state, full.layers[0].state);
    const double e0 = rel(w0.layers[0].state, full.layers[0].state);
    const double eb = rel(bf16.layers[0].state, full.layers[0].state);
    const double eh = rel(f16.layers[0].state, full.layers[0].state);
    const bool has_conv = full.layers[0].conv.rank() > 0;  // lightning attention has none
    const double conv = has_conv ? rel(w8.layers[0].conv, full.layers[0].conv) : 0.0;
    std::printf(
        "[ pic      ] %s layer 0 state rel. error: W=8 %.2e, W=0 %.2e, W=8 with bf16 "
        "entries %.2e, f16 %.2e; deepest linear layer W=8 %.2e\n",
        arch, e8, e0, eb, eh, rel(w8.layers[2].state, full.layers[2].state));
    EXPECT_LE(e8, 1e-5);
    if (has_conv) {
      EXPECT_LE(conv, 1e-6);
      EXPECT_GT(e0, 10 * e8);  // without the window, the conv tail of each segment is wrong
    } else {
      EXPECT_LE(e0, 1e-5);  // no conv tail: layer 0 composes exactly without a window too
    }
    EXPECT_LE(eb, 1e-2);  // bf16 T and S(R|0): one rounding's worth (2^-9), not compounding
    EXPECT_LE(eh, 2e-3);
    EXPECT_EQ(w8.n_tokens, full.n_tokens);
  }
}

TEST(PicEngine, EntryOfAWholeSegmentReproducesItsPrefill) {
  // From an empty cache, junction + composition is exact in every layer (offset 0).
  Model m = tiny_model();
  std::mt19937 rng(3);
  const auto seg = random_tokens(rng, 100, m.config().vocab_size);
  const InferenceCache full = recompute(m, {}, {seg});
  for (int w : {0, 3, 8, 99}) {
    const InferenceCache c = compose(m, {}, {seg}, w, false);
    for (size_t l = 0; l < c.layers.size(); ++l) {
      if (c.layers[l].kind == hypic::model::LayerKind::Linear) {
        EXPECT_LE(rel(c.layers[l].state, full.layers[l].state), 1e-5) << "w=" << w << " l=" << l;
      } else {
        EXPECT_LE(rel(c.layers[l].k, full.layers[l].k), 1e-5) << "w=" << w;
        EXPECT_LE(rel(c.layers[l].v, full.layers[l].v), 1e-5) << "w=" << w;
      }
    }
  }
}

// The windows of all segments in one layer-by-layer pass give what one window after the
// other gives: every linear state and conv tail, every attention K and V, in every layer,
// for fixed and shared widths, empty windows (W = 0, a 1-token segment), 1-token windows
// (a 2-token segment: the recurrent form), with and without a prefix, and with blocks too
// small for all windows (a window cut in pieces).
TEST(PicEngine, BatchedJunctionWindowsEqualOneWindowAfterTheOther) {
  for (const char* arch : {"qwen3_5", "qwen3_next"}) {
    Model m = tiny_model(arch);
    double largest = 0;
    std::mt19937 rng(21);
    const int V = m.config().vocab_size;
    const std::vector<std::vector<int32_t>> segs = {
        random_tokens(rng, 40, V), random_tokens(rng, 150, V), random_tokens(rng, 2, V),
        random_tokens(rng, 1, V),  random_tokens(rng, 9, V),   random_tokens(rng, 70, V)};
    for (const char* junction : {"8", "0", "3", "0.5", "0.95"}) {
      const auto spec = hypic::pic::JunctionSpec::parse(junction);
      const auto entries = entries_of(m, segs, spec, hypic::DType::BF16);
      for (int max_block : {2048, 64}) {
        m.set_max_block_tokens(max_block);
        for (bool with_prefix : {false, true}) {
          const std::vector<int32_t> prefix =
              with_prefix ? random_tokens(rng, 5, V) : std::vector<int32_t>{};
          const InferenceCache ref = compose_per_segment(m, prefix, segs, entries, false);
          const InferenceCache got = compose_entries(m, prefix, segs, entries, false);
          ASSERT_EQ(got.n_tokens, ref.n_tokens);
          // Relative L2 difference per tensor (state, conv tail, K, V of every layer).
          double worst = 0;
          for (size_t l = 0; l < got.layers.size(); ++l) {
            const auto& g = got.layers[l];
            const auto& r = ref.layers[l];
            const std::vector<std::pair<const Tensor*, const Tensor*>> pairs =
                g.kind == hypic::model::LayerKind::Linear
                    ? std::vector<std::pair<const Tensor*, const Tensor*>>{{&g.state, &r.state},
                                                                           {&g.conv, &r.conv}}
                    : std::vector<std::pair<const Tensor*, const Tensor*>>{{&g.k, &r.k},
                                                                           {&g.v, &r.v}};
            for (const auto& [a, b] : pairs) {
              ASSERT_EQ(a->shape(), b->shape()) << "layer " << l;
              if (b->empty()) continue;
              worst = std::max(worst, rel(*a, *b));
            }
          }
          // Each token's rows are the same arithmetic on the same inputs; the products see
          // more rows at once, and OpenBLAS may then take another kernel (its small-matrix
          // path for a few rows), which sums the same terms in another order: float rounding.
          EXPECT_LE(worst, 1e-6) << arch << " junction " << junction << " block " << max_block
                                 << (with_prefix ? " with prefix" : "");
          largest = std::max(largest, worst);
        }
      }
      m.set_max_block_tokens(2048);
    }
    std::printf(
        "[ pic      ] %s: batched vs one window after the other, largest relative "
        "difference of a state, conv tail, K or V: %.2e\n",
        arch, largest);
  }
}

// Relative L2 difference of the caches, tensor by tensor (state, conv tail, K, V).
double worst_cache_difference(const InferenceCache& got, const InferenceCache& ref) {
  double worst = 0;
  EXPECT_EQ(got.layers.size(), ref.layers.size());
  for (size_t l = 0; l < std::min(got.layers.size(), ref.layers.size()); ++l)
    for (const auto& [a, b] :
         {std::pair<const Tensor*, const Tensor*>{&got.layers[l].state, &ref.layers[l].state},
          {&got.layers[l].conv, &ref.layers[l].conv},
          {&got.layers[l].k, &ref.layers[l].k},
          {&got.layers[l].v, &ref.layers[l].v}}) {
      EXPECT_EQ(a->shape(), b->shape()) << "layer " << l;
      if (b->rank() == 0 || b->empty() || a->shape() != b->shape()) continue;
      worst = std::max(worst, rel(*a, *b));
    }
  return worst;
}

// The engine runs the question as the last window of the junction pass (one pass over the
// weights): the same logits and caches as composing first and prefilling the question after.
TEST(PicEngine, QuestionInTheJunctionPassEqualsItsPrefillAfterComposing) {
  for (const hypic::model::ArchSpec* spec : hypic::model::architectures()) {
    const char* arch = spec->name();
    Model m = tiny_model(arch);
    double largest = 0;
    std::mt19937 rng(23);
    const int V = m.config().vocab_size;
    const std::vector<std::vector<int32_t>> three = {
        random_tokens(rng, 40, V), random_tokens(rng, 150, V), random_tokens(rng, 9, V)};
    // One segment too: its window is the pass's only span before the question's (or the only
    // one, where compose_segments makes the reference), with its cached rows spliced after it.
    const std::vector<std::vector<int32_t>> one = {three[1]};
    for (const auto* segs : {&three, &one})
      for (const char* junction : {"8", "0"}) {
        const auto entries = entries_of(m, *segs, hypic::pic::JunctionSpec::parse(junction));
        std::vector<hypic::pic::PlacedSegment> placed;
        for (size_t i = 0; i < segs->size(); ++i) placed.push_back({&(*segs)[i], &entries[i]});
        for (int max_block : {2048, 64}) {
          m.set_max_block_tokens(max_block);
          for (int question_tokens : {1, 17, 70}) {
            const auto question = random_tokens(rng, question_tokens, V);
            InferenceCache ref = m.new_cache();
            hypic::pic::compose_segments(m, placed, false, ref);
            const std::vector<float> ref_logits =
                m.prefill(question, ref, LogitsMode::Last).to_vector();
            const std::vector<float> ref_hidden = m.last_hidden();

            InferenceCache got = m.new_cache();
            double splice_seconds = -1;
            const Tensor logits =
                hypic::pic::compose_with_question(m, placed, question, false, got, splice_seconds);
            ASSERT_EQ(logits.shape(), (std::vector<int64_t>{1, V}));
            EXPECT_GE(splice_seconds, 0.0);
            ASSERT_EQ(got.n_tokens, ref.n_tokens);
            const std::vector<float> x = logits.to_vector();
            const double dl = hypic::pic::relative_l2(x.data(), ref_logits.data(), x.size());
            const double dh = hypic::pic::relative_l2(m.last_hidden().data(), ref_hidden.data(),
                                                      ref_hidden.size());
            const double dc = worst_cache_difference(got, ref);
            const std::string where = std::string(arch) + " segments " +
                                      std::to_string(segs->size()) + " junction " + junction +
                                      " block " + std::to_string(max_block) + " question " +
                                      std::to_string(question_tokens);
            // Same arithmetic per row; the products see more rows at once, so OpenBLAS may
            // take another kernel for them (its small-matrix path for the question alone):
            // float rounding. The caches stay within 1e-6; the logits and the last hidden row,
            // carried through every layer of a random model, reach 1.04e-6 (qwen3_5, 17-token
            // question), hence 2e-6 for those two.
            EXPECT_LE(dl, 2e-6) << where;
            EXPECT_LE(dh, 2e-6) << where;
            EXPECT_LE(dc, 1e-6) << where;
            largest = std::max({largest, dl, dh, dc});
          }
        }
        m.set_max_block_tokens(2048);
      }
    InferenceCache cache = m.new_cache();
    double seconds = 0;
    EXPECT_THROW(hypic::pic::compose_with_question(m, {}, {}, false, cache, seconds), hypic::Error);
    std::printf(
        "[ pic      ] %s: question in the junction pass vs its own prefill after composing, "
        "largest relative difference of logits, last hidden row, state, conv, K or V: %.2e\n",
        arch, largest);
  }
}

// A segment composed on its own is a pass of one window with its cached rows spliced after it:
// the window's queries must not see those rows. Every architecture, with its layer kinds
// rotated so that an attention layer is not the last one (in the last layer a wrong attention
// output of the window's rows changes nothing that is cached).
TEST(PicEngine, OneSegmentAtATimeEqualsItsWindowThenItsSplice) {
  for (const hypic::model::ArchSpec* spec : hypic::model::architectures()) {
    auto cfg = hypic::model::preset_config(hypic::model::parse_arch(spec->name()), "tiny");
    std::rotate(cfg.layer_types.begin(), cfg.layer_types.begin() + 1, cfg.layer_types.end());
    Model m(cfg, hypic::model::random_weights(cfg, 7));
    std::mt19937 rng(29);
    const int V = cfg.vocab_size;
    const std::vector<std::vector<int32_t>> segs = {
        random_tokens(rng, 40, V), random_tokens(rng, 150, V), random_tokens(rng, 9, V)};
    const auto entries = entries_of(m, segs, hypic::pic::JunctionSpec::parse("8"));
    const InferenceCache ref = compose_per_segment(m, {}, segs, entries, false);
    InferenceCache got = m.new_cache();
    for (size_t i = 0; i < segs.size(); ++i)
      hypic::pic::compose_segments(m, {{&segs[i], &entries[i]}}, false, got);
    ASSERT_EQ(got.n_tokens, ref.n_tokens) << spec->name();
    EXPECT_LE(worst_cache_difference(got, ref), 1e-6) << spec->name();
  }
}

TEST(PicEngine, RerotatedKeysEqualKeysComputedAtTheOffset) {
  const auto cfg = hypic::model::preset_config(hypic::model::parse_arch("qwen3_5"), "small");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int n = 37, H = cfg.num_key_value_heads, hd = cfg.head_dim;
  Tensor raw({n, H, hd});
  for (auto& x : raw.values()) x = nd(rng);
  const hypic::kernels::RopeDims d{n, H, hd, cfg.rotary_dim(), static_cast<float>(cfg.rope_theta)};
  // Reference: the exact rotation at position q + offset, in double (f32 inverse
  // frequencies, as rope_apply uses).
  auto reference = [&](int64_t pos0) {
    Tensor out = raw;
    const int half = d.rotary_dim / 2;
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < half; ++i) {
          const float inv = 1.0f / std::pow(d.theta, float(2 * i) / float(d.rotary_dim));
          const double a = double(pos0 + t) * inv;
          float* x = out.data() + (size_t(t) * H + h) * hd;
          const double x1 = raw[(int64_t(t) * H + h) * hd + i],
                       x2 = raw[(int64_t(t) * H + h) * hd + i + half];
          x[i] = float(x1 * std::cos(a) - x2 * std::sin(a));
          x[i + half] = float(x2 * std::cos(a) + x1 * std::sin(a));
        }
    return out;
  };
  auto worst = [&](const Tensor& a, const Tensor& b) {
    double w = 0;
    for (int64_t i = 0; i < a.numel(); ++i) w = std::max(w, double(std::fabs(a[i] - b[i])));
    return w;
  };
  for (int64_t offset : {1, 517, 4093, 30000}) {
    Tensor local = raw, direct = raw;
    hypic::kernels::rope_apply(d, local.data(), 8);  // segment-local positions 8 … 44
    hypic::pic::rerotate_keys(hypic::kernels::host_backend(), cfg, local, offset);
    hypic::kernels::rope_apply(d, direct.data(), 8 + offset);
    const Tensor exact = reference(8 + offset);
    const double e_shift = worst(local, exact), e_direct = worst(direct, exact);
    std::printf(
        "[ pic      ] offset %6lld: max|K error| re-rotated %.2e, computed at the offset "
        "in f32 %.2e, difference %.2e\n",
        static_cast<long long>(offset), e_shift, e_direct, worst(local, direct));
    // f32 angles lose precision with the position; re-rotation is never worse than computing
    // at the offset directly, and equal to it at moderate offsets.
    EXPECT_LE(e_shift, 2 * e_direct + 2e-5) << "offset " << offset;
    if (offset < 1000) {
      EXPECT_LE(worst(local, direct), 2e-5) << "offset " << offset;
    }
  }
}

TEST(PicEngine, EntryStoreRoundTrip) {
  Model m = tiny_model("qwen3_next");
  std::mt19937 rng(9);
  const auto seg = random_tokens(rng, 77, m.config().vocab_size);
  const std::string fp = hypic::pic::model_fingerprint(m.config(), m.weights());
  const SegmentEntry e = hypic::pic::compute_entry(m, seg, 8);
  EXPECT_EQ(e.cached_tokens(), 69);
  const fs::path dir = fs::temp_directory_path() / ("hypic_pic_rt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (auto dtype : {hypic::DType::F32, hypic::DType::BF16}) {
    hypic::store::StoreOptions o;
    o.model_fingerprint = fp;
    o.junction = 8;
    o.dtype = dtype;
    const std::string path = (dir / (std::string(hypic::dtype_name(dtype)) + ".h5")).string();
    const std::string key = hypic::store::entry_key(fp, seg, 8);
    {
      auto st = hypic::store::SegmentStore::create(path, o);
      EXPECT_TRUE(st.put(key, hypic::pic::to_store_entry(e)));
    }
    auto st = hypic::store::SegmentStore::open(path, fp, 8, hypic::store::OpenMode::kRead);
    auto got = st.get(key);
    ASSERT_TRUE(got.has_value());
    const SegmentEntry back = hypic::pic::from_store_entry(std::move(*got), m.config(), 8);
    SegmentEntry expect = e;
    hypic::pic::round_to_dtype(expect, dtype);
    ASSERT_EQ(back.linear.size(), expect.linear.size());
    ASSERT_EQ(back.attention.size(), expect.attention.size());
    for (size_t i = 0; i < back.linear.size(); ++i) {
      EXPECT_EQ(back.linear[i].summary.t, expect.linear[i].summary.t);
      EXPECT_EQ(back.linear[i].summary.s, expect.linear[i].summary.s);
      EXPECT_EQ(back.linear[i].conv.to_vector(), expect.linear[i].conv.to_vector());
    }
    for (size_t i = 0; i < back.attention.size(); ++i) {
      EXPECT_EQ(back.attention[i].k.to_vector(), expect.attention[i].k.to_vector());
      EXPECT_EQ(back.attention[i].v.to_vector(), expect.attention[i].v.to_vector());
    }
    EXPECT_EQ(back.bytes(), e.bytes());
  }
  fs::remove_all(dir);
}

TEST(PicEngine, FingerprintSeesConfigAndWeights) {
  const auto cfg = hypic::model::preset_config(hypic::model::parse_arch("qwen3_5"), "tiny");
  const auto w1 = hypic::model::random_weights(cfg, 1);
  auto w2 = w1;
  const std::string a = hypic::pic::model_fingerprint(cfg, w1);
  EXPECT_EQ(a, hypic::pic::model_fingerprint(cfg, w2));
  w2.final_norm[3] += 1e-3f;
  EXPECT_NE(a, hypic::pic::model_fingerprint(cfg, w2));
  auto cfg2 = cfg;
  cfg2.rope_theta *= 2;
  EXPECT_NE(a, hypic::pic::model_fingerprint(cfg2, w1));
}

TEST(PicEngine, JunctionSpec) {
  using hypic::pic::JunctionSpec;
  EXPECT_EQ(JunctionSpec::parse("8").tokens_for(100), 8);
  EXPECT_EQ(JunctionSpec::parse("8").tokens_for(5), 4);  // capped at n − 1
  EXPECT_EQ(JunctionSpec::parse("0").tokens_for(100), 0);
  EXPECT_EQ(JunctionSpec::parse("0.25").tokens_for(10), 3);  // ceil(2.5)
  EXPECT_EQ(JunctionSpec::parse("1.0").tokens_for(10), 9);
  EXPECT_EQ(JunctionSpec::parse("1").tokens_for(10), 1);  // an integer is a token count
  EXPECT_EQ(JunctionSpec::parse("0.25").store_code(), -2500);
  EXPECT_EQ(JunctionSpec::from_store_code(-2500).to_string(), "0.25");
  EXPECT_EQ(JunctionSpec::from_store_code(8).to_string(), "8");
  EXPECT_THROW(JunctionSpec::parse("-1"), hypic::Error);
  EXPECT_THROW(JunctionSpec::parse("1.5"), hypic::Error);
  EXPECT_THROW(JunctionSpec::parse("x"), hypic::Error);
}

TEST(PicEngine, LruCacheKeepsTheBudget) {
  hypic::pic::LruCache<int> c(100);
  c.put("a", std::make_shared<const int>(1), 40);
  c.put("b", std::make_shared<const int>(2), 40);
  ASSERT_TRUE(c.get("a"));  // a is now the most recent
  c.put("c", std::make_shared<const int>(3), 40);
  EXPECT_TRUE(c.contains("a"));
  EXPECT_FALSE(c.contains("b"));
  EXPECT_TRUE(c.contains("c"));
  EXPECT_EQ(c.bytes(), 80u);
  EXPECT_EQ(c.evictions(), 1u);
  EXPECT_FALSE(c.put("huge", std::make_shared<const int>(4), 101));
  EXPECT_EQ(c.size(), 2u);
}

TEST(PicEngine, FidelityMeasures) {
  const std::vector<float> p = {1, 2, 3}, q = {1, 2, 3}, r = {3, 2, 1};
  EXPECT_NEAR(hypic::pic::kl_divergence_logits(p.data(), q.data(), 3), 0.0, 1e-12);
  EXPECT_GT(hypic::pic::kl_divergence_logits(p.data(), r.data(), 3), 0.5);
  const auto a = hypic::pic::token_agreement({1, 2, 3, 4}, {1, 2, 9, 4});
  EXPECT_DOUBLE_EQ(a.prefix_fraction, 0.5);
  EXPECT_FALSE(a.exact);
  EXPECT_TRUE(hypic::pic::token_agreement({1, 2}, {1, 2}).exact);
}

}  // namespace pic_engine_test
}  // namespace
