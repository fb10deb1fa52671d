// ModelWeights helpers.
#include "model/weights.hpp"

namespace hypic::model {
namespace {

size_t mlp_count(const MlpWeights& m) {
  return static_cast<size_t>(m.gate_up.numel() + m.down.numel());
}

}  // namespace

size_t ModelWeights::parameter_count() const {
  size_t n = static_cast<size_t>(embed.numel() + final_norm.numel() + lm_head.numel());
  for (const LayerWeights& L : layers) {
    n += static_cast<size_t>(L.input_norm.numel() + L.post_attn_norm.numel());
    const GdnWeights& g = L.linear;
    n += static_cast<size_t>(g.in_proj.numel() + g.conv1d.numel() + g.dt_bias.numel() +
                             g.A_log.numel() + g.norm.numel() + g.out_proj.numel());
    const AttentionWeights& a = L.attn;
    n += static_cast<size_t>(a.q_proj.numel() + a.k_proj.numel() + a.v_proj.numel() +
                             a.o_proj.numel() + a.q_norm.numel() + a.k_norm.numel());
    n += mlp_count(L.mlp);
    n += static_cast<size_t>(L.moe.router.numel() + L.moe.shared_expert_gate.numel());
    for (const MlpWeights& e : L.moe.experts) n += mlp_count(e);
    n += mlp_count(L.moe.shared_expert);
  }
  return n;
}

}  // namespace hypic::model
