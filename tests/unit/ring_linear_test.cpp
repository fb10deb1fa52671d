// Ring-linear (bailing_moe_linear): the lightning layer's decay slopes, and the PIC state
// re-rotation of MATH.md §4 / docs/linear-family.md §5 in the real model: a segment's entry,
// computed at segment-local positions, spliced after a prefix at a shifted offset must give
// the state that recomputing prefix + segment gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "model/forward.hpp"
#include "model/layers_ring.hpp"
#include "model/presets.hpp"
#include "model/safetensors.hpp"
#include "pic/compose.hpp"
#include "pic/entry_upload.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"

namespace {
namespace ring_linear_test {
using hypic::model::InferenceCache;
using hypic::model::LayerKind;
using hypic::model::LogitsMode;
using hypic::model::Model;

double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(b[i])));
  }
  return d / m;
}

// The ALiBi slopes for 6 heads (not a power of two: 4 geometric ones from 2^-2, then every
// other slope of 8 heads) scaled for layer 3 of 7 by 1 - 2/6 + 1e-5.
TEST(RingLinear, DecaySlopes) {
  auto cfg = hypic::model::preset_config(hypic::model::parse_arch("bailing_moe_linear"), "tiny");
  cfg.num_attention_heads = 6;
  cfg.num_hidden_layers = 7;
  const std::vector<float> g = hypic::model::ring_log_decay(cfg, 3);
  const double slopes[6] = {
      0.25, 0.0625, 0.015625, 0.00390625, std::pow(2.0, -1), std::pow(2.0, -3)};
  ASSERT_EQ(g.size(), 6u);
  for (int h = 0; h < 6; ++h)
    EXPECT_NEAR(g[static_cast<size_t>(h)], -slopes[h] * (1.0 - 2.0 / 6.0 + 1e-5), 1e-7) << h;
  // Layer 0 decays by more than the plain slopes (factor 1 + 1/6 + 1e-5).
  EXPECT_NEAR(hypic::model::ring_log_decay(cfg, 0)[0], -0.25 * (1.0 + 1.0 / 6.0 + 1e-5), 1e-7);
}

// prefix P (recomputed), then segment C from its entry (junction 0: nothing recomputed), at
// offset |P|: the first linear layer's state equals recomputing P + C (its inputs depend on
// the tokens only). Without the re-rotation of S(C|0) it does not.
TEST(RingLinear, ReRotatedStateAtShiftedOffsetEqualsRecompute) {
  Model model = pic_test::remembering_tiny_model("bailing_moe_linear", 5);
  const auto& cfg = model.config();
  int first = -1;
  for (int l = 0; l < cfg.num_hidden_layers && first < 0; ++l)
    if (cfg.layer_types[static_cast<size_t>(l)] == LayerKind::RingLinear) first = l;
  ASSERT_EQ(first, 0);
  std::mt19937 rng(3);
  for (auto [prefix_len, junction] :
       {std::pair{37, 0}, std::pair{130, 0}, std::pair{0, 8}, std::pair{37, 8}}) {
    const auto prefix = pic_test::random_tokens(rng, prefix_len, cfg.vocab_size);
    const auto segment = pic_test::random_tokens(rng, 45, cfg.vocab_size);
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), segment.begin(), segment.end());
    InferenceCache full = model.new_cache();
    model.prefill(all, full, LogitsMode::None);

    const hypic::pic::SegmentEntry entry = hypic::pic::compute_entry(model, segment, junction);
    ASSERT_EQ(entry.linear.front().summary.structure, hypic::kernels::TStructure::Scalar);
    ASSERT_EQ(entry.linear.front().summary.t.size(), static_cast<size_t>(cfg.num_attention_heads));
    InferenceCache composed = model.new_cache();
    InferenceCache unrotated = model.new_cache();
    if (prefix_len > 0) {
      model.prefill(prefix, composed, LogitsMode::None);
      model.prefill(prefix, unrotated, LogitsMode::None);
    }
    hypic::pic::compose_segments(model, {{&segment, &entry}}, false, composed);
    EXPECT_EQ(composed.n_tokens, full.n_tokens);

    // Host copies (the caches are device tensors under HYPIC_TEST_DEVICE=cuda|fake).
    const std::vector<float> want = full.layers[static_cast<size_t>(first)].state.to_vector();
    const std::vector<float> got = composed.layers[static_cast<size_t>(first)].state.to_vector();
    const double err = rel_diff(got.data(), want.data(), want.size());
    // The same composition with S(C|0) left at segment-local positions (no re-rotation).
    std::vector<float> unrotated_state =
        unrotated.layers[static_cast<size_t>(first)].state.to_vector();
    hypic::pic::apply_layers(hypic::kernels::host_backend(), {&entry.linear.front().summary},
                             {unrotated_state.data()});
    const double err_unrotated = rel_diff(unrotated_state.data(), want.data(), want.size());
    std::printf(
        "[ ring     ] offset %d, window %d: composed vs recompute %.3g, without re-rotation %.3g\n",
        prefix_len, junction, err, err_unrotated);
    EXPECT_LE(err, 1e-5);
    if (prefix_len > 0 && junction == 0) {
      EXPECT_GT(err_unrotated, 1e-2);
    }
  }
}

// The same with the entry resident on a device (the stand-in of fake_device.hpp): S(C|0) is
// moved on the device (Backend::rerotate_states, into scratch) and the composed state equals
// recompute, and the host entry's composition bit for bit; the resident entry itself stays at
// offset 0, so a second splice at another offset is right too.
TEST(RingLinear, ResidentEntryReRotatesOnTheDevice) {
  namespace pic = hypic::pic;
  Model host_model = pic_test::remembering_tiny_host_model("bailing_moe_linear", 5);
  Model dev(host_model.config(),
            hypic::model::to_backend(host_model.weights(), pic_test::fake_device()),
            pic_test::fake_device());
  const auto& cfg = host_model.config();
  std::mt19937 rng(4);
  const auto segment = pic_test::random_tokens(rng, 45, cfg.vocab_size);
  pic::EntryUploader uploader(pic_test::fake_device());
  const pic::SegmentEntry resident = uploader.upload(pic::compute_entry(host_model, segment, 0));
  ASSERT_TRUE(resident.resident());
  ASSERT_TRUE(resident.linear.front().summary.s.empty());  // its state lives on the device only
  const pic::SegmentEntry on_host = pic::compute_entry(host_model, segment, 0);
  for (int prefix_len : {37, 130}) {
    const auto prefix = pic_test::random_tokens(rng, prefix_len, cfg.vocab_size);
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), segment.begin(), segment.end());
    InferenceCache full = host_model.new_cache();
    host_model.prefill(all, full, LogitsMode::None);
    InferenceCache composed = dev.new_cache(), reference = host_model.new_cache();
    dev.prefill(prefix, composed, LogitsMode::None);
    host_model.prefill(prefix, reference, LogitsMode::None);
    pic::compose_segments(dev, {{&segment, &resident}}, false, composed);
    pic::compose_segments(host_model, {{&segment, &on_host}}, false, reference);
    for (size_t l = 0; l < full.layers.size(); ++l) {
      if (cfg.layer_types[l] != LayerKind::RingLinear) continue;
      const std::vector<float> got = composed.layers[l].state.to_vector();
      const std::vector<float> want = full.layers[l].state.to_vector();
      if (l == 0) {  // the first layer's inputs depend on the tokens only: exact
        const double err = rel_diff(got.data(), want.data(), want.size());
        std::printf("[ ring     ] resident entry at offset %d, layer 0: vs recompute %.3g\n",
                    prefix_len, err);
        EXPECT_LE(err, 1e-5) << "offset " << prefix_len;
      }
      EXPECT_EQ(got, reference.layers[l].state.to_vector())
          << "layer " << l << " offset " << prefix_len;
    }
  }
}

// A bf16 dense, what a device with tensor_core_products() receives (model::to_backend), takes
// the tensor-core route of ring_linear_layer's output (each norm group normalised and written
// back into its columns, all gated at once, one Backend::linear by the whole of dense; issue #45)
// instead of one f32 gemm per group. On the host (bf16 weights, exact f32 activations) it gives
// the per-group route's logits with the same, bf16-representable, dense values up to the order
// of the sums: for every row over three blocks (LogitsMode::All) and for the last row alone
// (LogitsMode::Last: only the rows from first_out on are normed and gated).
TEST(RingLinear, Bf16DenseOneProductMatchesThePerGroupProducts) {
  namespace model = hypic::model;
  const model::ModelConfig cfg =
      model::preset_config(model::parse_arch("bailing_moe_linear"), "tiny");
  ASSERT_GT(cfg.group_norm_size, 1);
  model::ModelWeights per_group = model::random_weights(cfg, 21);
  model::ModelWeights one_product = per_group;
  int linear_layers = 0;
  for (size_t l = 0; l < per_group.layers.size(); ++l) {
    hypic::Tensor& dense = per_group.layers[l].ring.dense;
    if (dense.rank() == 0) continue;
    ASSERT_EQ(dense.dtype(), hypic::DType::F32) << "layer " << l;
    hypic::Tensor bf16(dense.shape(), hypic::DType::BF16, hypic::Device::Host);
    auto* bits = static_cast<uint16_t*>(bf16.raw());
    float* values = dense.data();
    for (int64_t i = 0; i < dense.numel(); ++i) {
      bits[i] = model::f32_to_bf16(values[i]);
      values[i] = model::bf16_to_f32(bits[i]);
    }
    one_product.layers[l].ring.dense = std::move(bf16);
    if (cfg.layer_types[l] == LayerKind::RingLinear) ++linear_layers;
  }
  ASSERT_GT(linear_layers, 0);
  Model a(cfg, per_group), b(cfg, one_product);
  a.set_max_block_tokens(64);
  b.set_max_block_tokens(64);
  std::mt19937 rng(22);
  const auto ids = pic_test::random_tokens(rng, 150, cfg.vocab_size);
  for (LogitsMode mode : {LogitsMode::All, LogitsMode::Last}) {
    InferenceCache ca = a.new_cache(), cb = b.new_cache();
    const std::vector<float> la = a.prefill(ids, ca, mode).to_vector();
    const std::vector<float> lb = b.prefill(ids, cb, mode).to_vector();
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_FALSE(la.empty());
    double diff = 0, scale = 1;
    for (size_t i = 0; i < la.size(); ++i) {
      scale = std::max(scale, std::fabs(double(la[i])));
      const double e = std::fabs(double(lb[i]) - double(la[i]));
      if (!(e <= diff)) diff = std::isnan(e) ? INFINITY : e;
    }
    std::printf(
        "[ ring     ] bf16 dense as one product vs per group (%s): max logit difference "
        "%.3g (largest %.3g)\n",
        mode == LogitsMode::All ? "all rows" : "last row", diff, scale);
    EXPECT_LE(diff, 1e-5 * scale);
  }
}

}  // namespace ring_linear_test
}  // namespace
