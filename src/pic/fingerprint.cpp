#include "pic/fingerprint.hpp"

#include <functional>
#include <nlohmann/json.hpp>

#include "store/checksum.hpp"

namespace hypic::pic {
namespace {

// Calls `visit` on every tensor of the weights, in a fixed order.
void for_each_tensor(const model::ModelWeights& w,
                     const std::function<void(const Tensor&)>& visit) {
  auto mlp = [&](const model::MlpWeights& m) {
    visit(m.gate_up);
    visit(m.down);
  };
  visit(w.embed);
  for (const model::LayerWeights& l : w.layers) {
    visit(l.input_norm);
    visit(l.post_attn_norm);
    if (!l.ring.qkv.empty()) {
      for (const Tensor* t : {&l.ring.qkv, &l.ring.dense, &l.ring.q_norm, &l.ring.k_norm,
                              &l.ring.g_proj, &l.ring.g_norm})
        if (t->rank() > 0) visit(*t);
    } else if (l.kind == model::LayerKind::Linear) {
      for (const Tensor* t : {&l.linear.in_proj, &l.linear.conv1d, &l.linear.dt_bias,
                              &l.linear.A_log, &l.linear.norm, &l.linear.out_proj})
        visit(*t);
    } else if (l.kind == model::LayerKind::Lightning) {
      for (const Tensor* t : {&l.lightning.qkv_proj, &l.lightning.output_gate, &l.lightning.norm,
                              &l.lightning.out_proj})
        visit(*t);
    } else if (l.kind == model::LayerKind::Kda) {
      const model::KdaWeights& k = l.kda;
      for (const Tensor* t : {&k.qkv, &k.conv1d, &k.f_a, &k.f_b, &k.A_log, &k.dt_bias, &k.b_proj,
                              &k.g_a, &k.g_b, &k.o_norm, &k.o_proj})
        visit(*t);
    } else if (l.kind == model::LayerKind::Mla) {
      const model::MlaWeights& m = l.mla;
      for (const Tensor* t : {&m.q_proj, &m.q_a_proj, &m.q_a_norm, &m.q_b_proj, &m.kv_a_proj,
                              &m.kv_a_norm, &m.kv_b_proj, &m.o_proj})
        visit(*t);
    } else {
      for (const Tensor* t : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj,
                              &l.attn.q_norm, &l.attn.k_norm})
        visit(*t);
    }
    if (l.is_moe) {
      visit(l.moe.router);
      if (!l.moe.router_bias.empty()) visit(l.moe.router_bias);
      for (const model::MlpWeights& e : l.moe.experts) mlp(e);
      mlp(l.moe.shared_expert);
      visit(l.moe.shared_expert_gate);
    } else {
      mlp(l.mlp);
    }
  }
  visit(w.final_norm);
  visit(w.lm_head);
}

}  // namespace

std::string model_fingerprint(const model::ModelConfig& config,
                              const model::ModelWeights& weights) {
  const std::string config_text = config.to_json().dump();
  store::Fnv1a128 config_hash;
  config_hash.update(config_text.data(), config_text.size());

  store::Fnv1a128 weights_hash;
  for_each_tensor(weights, [&](const Tensor& t) {
    weights_hash.update_value<uint64_t>(t.shape().size());
    for (int64_t d : t.shape()) weights_hash.update_value<int64_t>(d);
    // The f32 values, whatever the dtype in memory: a bf16 checkpoint kept in bf16 has the
    // fingerprint it had when loaded as f32, so its stores stay valid. Weights on a device are
    // hashed from a host copy: the same bytes, the same fingerprint.
    const Tensor copy = t.device() == Device::Host ? Tensor() : t.to(Device::Host);
    const Tensor& h = t.device() == Device::Host ? t : copy;
    if (h.is_host_f32()) {
      weights_hash.update_value<uint32_t>(store::crc32c(h.data(), h.bytes()));
    } else {
      const std::vector<float> v = h.to_f32_vector();
      weights_hash.update_value<uint32_t>(store::crc32c(v.data(), v.size() * sizeof(float)));
    }
  });
  return std::string(model::arch_name(config.arch)) + "-" +
         store::to_hex(config_hash.digest()).substr(0, 16) + "-" +
         store::to_hex(weights_hash.digest());
}

}  // namespace hypic::pic
