#include "pic/compose.hpp"

#include <string>
#include <vector>

namespace hypic::pic {
namespace {

kernels::RopeDims key_rope(const model::ModelConfig& cfg, int64_t rows) {
  return {static_cast<int>(rows), cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim(),
          static_cast<float>(cfg.rope_theta)};
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
