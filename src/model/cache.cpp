#include "model/cache.hpp"

#include <utility>
#include <vector>

namespace hypic::model {
void LayerCache::append_kv(const float* k_rows, const float* v_rows, int64_t T,
                           const Allocator* device) {
  HYPIC_REQUIRE(!is_linear_kind(kind), "append_kv on a linear-attention layer cache");
  if (kind == LayerKind::Mla) {  // latent rows only: they are the keys and the values
    HYPIC_REQUIRE(k.rank() == 3 && v_rows == nullptr, "MLA cache rows must be [n, 1, r + rope]");
    HYPIC_REQUIRE(
        k.device() == Device::Host || (device != nullptr && device->device() == k.device()),
        "append_kv on a device cache needs that device's allocator");
    k.append_rows(k_rows, T);  // in place while there is room (geometric growth)
    return;
  }
  HYPIC_REQUIRE(k.rank() == 3 && v.rank() == 3, "attention cache K/V must be [n, Hkv, hd]");
  HYPIC_REQUIRE(k.device() == Device::Host || (device != nullptr && device->device() == k.device()),
                "append_kv on a device cache needs that device's allocator");
  k.append_rows(k_rows, T);  // amortised growth for decode steps, host or device
  v.append_rows(v_rows, T);
}

void LayerCache::reserve_kv(int64_t tokens) {
  if (is_linear_kind(kind)) return;
  k.reserve_rows(tokens);
  if (kind != LayerKind::Mla) v.reserve_rows(tokens);
}

InferenceCache InferenceCache::empty(const ModelConfig& cfg, const Allocator* device) {
  InferenceCache cache;
  cache.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    LayerCache& lc = cache.layers[static_cast<size_t>(i)];
    lc.kind = cfg.layer_types.at(static_cast<size_t>(i));
    if (lc.kind == LayerKind::Lightning || lc.kind == LayerKind::RingLinear) {  // no conv
      lc.state = Tensor({cfg.num_attention_heads, cfg.head_dim, cfg.head_dim});
    } else if (is_linear_kind(lc.kind)) {  // Gated DeltaNet, KDA: state and conv tail
      lc.state =
          Tensor({cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim});
      lc.conv = Tensor({cfg.linear_conv_kernel_dim - 1, cfg.linear_conv_dim()});
    } else {
      lc.k = Tensor({0, cfg.num_key_value_heads, cfg.head_dim});
      if (lc.kind != LayerKind::Mla) lc.v = Tensor({0, cfg.num_key_value_heads, cfg.head_dim});
    }
    if (device != nullptr && device->device() != Device::Host)  // zeros copied up once
      for (Tensor* t : {&lc.state, &lc.conv, &lc.k, &lc.v})
        if (t->rank() > 0) *t = t->to(device->device(), device);  // a default tensor stays
  }
  return cache;
}

size_t InferenceCache::bytes() const {
  size_t total = 0;
  for (const LayerCache& lc : layers)
    total += lc.state.bytes() + lc.conv.bytes() + lc.transition.bytes() + lc.transition_x.bytes() +
             lc.transition_y.bytes() + lc.k.bytes() + lc.v.bytes();
  return total;
}

}  // namespace hypic::model
