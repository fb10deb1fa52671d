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
    if (l.kind == model::LayerKind::Linear) {
      for (const Tensor* t : {&l.linear.in_proj, &l.linear.conv1d, &l.linear.dt_bias,
                              &l.linear.A_log, &l.linear.norm, &l.linear.out_proj})
        visit(*t);
    } else {
      for (const Tensor* t : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj,
                              &l.attn.q_norm, &l.attn.k_norm})
        visit(*t);
    }
    if (l.is_moe) {
      visit(l.moe.router);
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
    // fingerprint it had when loaded as f32, so its stores stay valid.
    if (t.is_host_f32()) {
      weights_hash.update_value<uint32_t>(store::crc32c(t.data(), t.bytes()));
    } else {
      const std::vector<float> v = t.to_f32_vector();
      weights_hash.update_value<uint32_t>(store::crc32c(v.data(), v.size() * sizeof(float)));
    }
  });
  return std::string(model::arch_name(config.arch)) + "-" +
         store::to_hex(config_hash.digest()).substr(0, 16) + "-" +
         store::to_hex(weights_hash.digest());
}

}  // namespace hypic::pic
