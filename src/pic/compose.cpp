#include "pic/compose.hpp"

#include <chrono>
#include <string>
#include <vector>

#include "model/weights.hpp"

namespace hypic::pic {
namespace {

kernels::RopeDims key_rope(const model::ModelConfig& cfg, int64_t rows) {
  return {static_cast<int>(rows), cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim(),
          static_cast<float>(cfg.rope_theta)};
}

// A summary in host memory (entries live there) as the op's view of arrays on `be`: on a
// device backend each array goes up once into `held`, which must outlive the op.
kernels::TransitionRef transition_on(const kernels::Backend& be, const LinearSummary& s,
                                     std::vector<Tensor>& held) {
  kernels::TransitionRef r;
  r.structure = s.structure;
  r.heads = s.heads;
  r.dk = s.dk;
  r.dv = s.dv;
  r.rank = s.rank;
  auto place = [&](const std::vector<float>& v) -> const float* {
    if (v.empty()) return nullptr;
    if (be.device() == Device::Host) return v.data();
    held.push_back(Tensor::from_vector({static_cast<int64_t>(v.size())}, v).to(be.device(), &be));
    return static_cast<const float*>(held.back().raw());
  };
  r.t = place(s.t);
  r.x = place(s.x);
  r.y = place(s.y);
  r.s0 = place(s.s);
  return r;
}

}  // namespace

void rerotate_keys(const kernels::Backend& be, const model::ModelConfig& config, Tensor& k,
                   int64_t delta) {
  if (k.empty()) return;
  be.rope_shift(key_rope(config, k.dim(0)), k.data(), delta);
}

void splice_layer(const kernels::Backend& be, const model::ModelConfig& config,
                  const SegmentEntry& entry, int layer, int64_t segment_start, bool addition,
                  model::LayerCache& cache) {
  const bool host = be.device() == Device::Host;
  if (model::is_linear_kind(cache.kind)) {
    for (const LinearLayerEntry& l : entry.linear) {
      if (l.layer != layer) continue;
      HYPIC_REQUIRE(cache.conv.shape() == l.conv.shape(),
                    "segment entry does not fit layer " + std::to_string(layer));
      if (host) {
        apply_layers(be, {&l.summary}, {cache.state.data()}, addition);
        be.copy_within(cache.conv.data(), l.conv.data(), l.conv.bytes());
        return;
      }
      std::vector<Tensor> held;  // the uploaded summary arrays, alive until the op has run
      const kernels::TransitionRef ref = transition_on(be, l.summary, held);
      float* state = model::f32(cache.state);
      be.compose_states(&ref, &state, 1, addition);
      be.copy_from_host(model::f32(cache.conv), l.conv.data(), l.conv.bytes());
      be.synchronize();
      return;
    }
  } else {
    for (const AttentionLayerEntry& a : entry.attention) {
      if (a.layer != layer) continue;
      const int64_t rows = entry.cached_tokens();
      const int64_t first = cache.kv_tokens();
      HYPIC_REQUIRE(first == segment_start + entry.junction,
                    "splice: layer " + std::to_string(layer) + " holds " + std::to_string(first) +
                        " tokens, expected the segment start plus its junction window (" +
                        std::to_string(segment_start + entry.junction) + ")");
      const int64_t row_floats = cache.k.dim(1) * cache.k.dim(2);
      if (cache.kind == model::LayerKind::Mla) {  // latent rows, no RoPE: nothing to rotate
        if (host) {
          cache.append_kv(a.k.data(), nullptr, rows);
          return;
        }
        const Tensor k = a.k.to(be.device(), &be);
        cache.append_kv(model::f32(k), nullptr, rows, &be);
        be.synchronize();  // the uploaded rows are freed on return
        return;
      }
      if (host) {
        cache.append_kv(a.k.data(), a.v.data(), rows);
        be.rope_shift(key_rope(config, rows), cache.k.data() + first * row_floats, segment_start);
        return;
      }
      const Tensor k = a.k.to(be.device(), &be), v = a.v.to(be.device(), &be);
      cache.append_kv(model::f32(k), model::f32(v), rows, &be);
      be.rope_shift(key_rope(config, rows), model::f32(cache.k) + first * row_floats,
                    segment_start);
      be.synchronize();  // the uploaded K/V are freed on return
      return;
    }
  }
  throw Error("segment entry has no part for layer " + std::to_string(layer));
}

double compose_segments(model::Model& model, const std::vector<PlacedSegment>& segments,
                        bool addition, model::InferenceCache& cache) {
  std::vector<model::Window> windows;
  std::vector<int64_t> starts;  // each segment's absolute position
  int64_t pos = cache.n_tokens;
  for (const PlacedSegment& s : segments) {
    const SegmentEntry& e = *s.entry;
    HYPIC_REQUIRE(static_cast<int64_t>(s.tokens->size()) == e.n_tokens && e.junction >= 0 &&
                      e.junction < e.n_tokens,
                  "segment of " + std::to_string(s.tokens->size()) +
                      " tokens does not match its entry (" + std::to_string(e.n_tokens) +
                      " tokens, window " + std::to_string(e.junction) + ")");
    windows.push_back({s.tokens->data(), e.junction, e.cached_tokens()});
    starts.push_back(pos);
    pos += e.n_tokens;
  }
  const kernels::Backend& be = model.backend();
  const model::ModelConfig& cfg = model.config();
  double splice_seconds = 0;
  model.prefill_windows(windows, cache, [&](int i, int layer, model::LayerCache& lc) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t k = static_cast<size_t>(i);
    splice_layer(be, cfg, *segments[k].entry, layer, starts[k], addition, lc);
    splice_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  return splice_seconds;
}

}  // namespace hypic::pic
