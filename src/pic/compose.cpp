#include "pic/compose.hpp"

#include <string>
#include <vector>

#include "model/weights.hpp"

namespace hypic::pic {
namespace {

kernels::RopeDims key_rope(const model::ModelConfig& cfg, int64_t rows) {
  return {static_cast<int>(rows), cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim(),
          static_cast<float>(cfg.rope_theta)};
}

// splice_entry for a cache in device memory: the entry (host memory) goes up once, array by
// array, then the same backend ops run there (compose_states for all layers at once, the
// K/V append within the device, the re-rotation of the appended keys).
void splice_entry_device(const kernels::Backend& be, const model::ModelConfig& config,
                         const SegmentEntry& entry, int64_t segment_start, bool addition,
                         model::InferenceCache& cache) {
  auto up = [&](const std::vector<float>& v) {
    return Tensor::from_vector({static_cast<int64_t>(v.size())}, v).to(be.device(), &be);
  };
  std::vector<Tensor> held;  // the uploaded summary arrays, alive until the op has run
  held.reserve(entry.linear.size() * 4);
  std::vector<kernels::TransitionRef> refs;
  std::vector<float*> states;
  for (const LinearLayerEntry& l : entry.linear) {
    model::LayerCache& lc = cache.layers.at(static_cast<size_t>(l.layer));
    HYPIC_REQUIRE(lc.kind == model::LayerKind::Linear && lc.conv.shape() == l.conv.shape(),
                  "segment entry does not fit layer " + std::to_string(l.layer));
    const LinearSummary& s = l.summary;
    kernels::TransitionRef r;
    r.structure = s.structure;
    r.heads = s.heads;
    r.dk = s.dk;
    r.dv = s.dv;
    r.rank = s.rank;
    auto keep = [&](const std::vector<float>& v) -> const float* {
      if (v.empty()) return nullptr;
      held.push_back(up(v));
      return static_cast<const float*>(held.back().raw());
    };
    r.t = keep(s.t);
    r.x = keep(s.x);
    r.y = keep(s.y);
    r.s0 = keep(s.s);
    refs.push_back(r);
    states.push_back(model::f32(lc.state));
    be.copy_from_host(model::f32(lc.conv), l.conv.data(), l.conv.bytes());
  }
  be.compose_states(refs.data(), states.data(), static_cast<int>(refs.size()), addition);

  const int64_t rows = entry.cached_tokens();
  for (const AttentionLayerEntry& a : entry.attention) {
    model::LayerCache& lc = cache.layers.at(static_cast<size_t>(a.layer));
    const int64_t first = lc.kv_tokens();
    const Tensor k = a.k.to(be.device(), &be), v = a.v.to(be.device(), &be);
    lc.append_kv(model::f32(k), model::f32(v), rows, &be);
    const int64_t row_floats = lc.k.dim(1) * lc.k.dim(2);
    be.rope_shift(key_rope(config, rows), model::f32(lc.k) + first * row_floats, segment_start);
  }
  be.synchronize();  // `held` and the uploaded K/V are freed on return
  cache.n_tokens += rows;
}

}  // namespace

void rerotate_keys(const kernels::Backend& be, const model::ModelConfig& config, Tensor& k,
                   int64_t delta) {
  if (k.empty()) return;
  be.rope_shift(key_rope(config, k.dim(0)), k.data(), delta);
}

void splice_entry(const kernels::Backend& be, const model::ModelConfig& config,
                  const SegmentEntry& entry, int64_t segment_start, bool addition,
                  model::InferenceCache& cache) {
  HYPIC_REQUIRE(cache.n_tokens == segment_start + entry.junction,
                "splice_entry: the cache holds " + std::to_string(cache.n_tokens) +
                    " tokens, expected the segment start plus its junction window (" +
                    std::to_string(segment_start + entry.junction) + ")");
  if (be.device() != Device::Host) {
    splice_entry_device(be, config, entry, segment_start, addition, cache);
    return;
  }
  std::vector<const LinearSummary*> sums;
  std::vector<float*> states;
  for (const LinearLayerEntry& l : entry.linear) {
    model::LayerCache& lc = cache.layers.at(static_cast<size_t>(l.layer));
    HYPIC_REQUIRE(lc.kind == model::LayerKind::Linear && lc.conv.shape() == l.conv.shape(),
                  "segment entry does not fit layer " + std::to_string(l.layer));
    sums.push_back(&l.summary);
    states.push_back(lc.state.data());
    be.copy_within(lc.conv.data(), l.conv.data(), l.conv.bytes());
  }
  apply_layers(be, sums, states, addition);  // all layers and heads in one parallel loop

  const int64_t rows = entry.cached_tokens();
  for (const AttentionLayerEntry& a : entry.attention) {
    model::LayerCache& lc = cache.layers.at(static_cast<size_t>(a.layer));
    const int64_t first = lc.kv_tokens();
    lc.append_kv(a.k.data(), a.v.data(), rows);
    const int64_t row_floats = lc.k.dim(1) * lc.k.dim(2);
    be.rope_shift(key_rope(config, rows), lc.k.data() + first * row_floats, segment_start);
  }
  cache.n_tokens += rows;
}

}  // namespace hypic::pic
