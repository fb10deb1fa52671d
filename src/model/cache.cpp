#include "model/cache.hpp"

namespace hypic::model {
void LayerCache::append_kv(const float* k_rows, const float* v_rows, int64_t T) {
  HYPIC_REQUIRE(kind == LayerKind::FullAttention, "append_kv on a linear-attention layer cache");
  HYPIC_REQUIRE(k.rank() == 3 && v.rank() == 3, "attention cache K/V must be [n, Hkv, hd]");
  k.append_rows(k_rows, T);  // amortised growth for decode steps
  v.append_rows(v_rows, T);
}

InferenceCache InferenceCache::empty(const ModelConfig& cfg) {
  InferenceCache cache;
  cache.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    LayerCache& lc = cache.layers[static_cast<size_t>(i)];
    lc.kind = cfg.layer_types.at(static_cast<size_t>(i));
    if (lc.kind == LayerKind::Linear) {
      lc.state =
          Tensor({cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim});
      lc.conv = Tensor({cfg.linear_conv_kernel_dim - 1, cfg.linear_conv_dim()});
    } else {
      lc.k = Tensor({0, cfg.num_key_value_heads, cfg.head_dim});
      lc.v = Tensor({0, cfg.num_key_value_heads, cfg.head_dim});
    }
  }
  return cache;
}

size_t InferenceCache::bytes() const {
  size_t total = 0;
  for (const LayerCache& lc : layers)
    total +=
        lc.state.bytes() + lc.conv.bytes() + lc.transition.bytes() + lc.k.bytes() + lc.v.bytes();
  return total;
}

}  // namespace hypic::model
