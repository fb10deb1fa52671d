// ModelWeights helpers.
#include "model/weights.hpp"

#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/safetensors.hpp"

namespace hypic::model {
namespace {

std::vector<const Tensor*> kda_tensors(const KdaWeights& k) {
  return {&k.qkv,    &k.conv1d, &k.f_a, &k.f_b,    &k.A_log, &k.dt_bias,
          &k.b_proj, &k.g_a,    &k.g_b, &k.o_norm, &k.o_proj};
}
std::vector<const Tensor*> mla_tensors(const MlaWeights& m) {
  return {&m.q_proj,    &m.q_a_proj,  &m.q_a_norm,  &m.q_b_proj,
          &m.kv_a_proj, &m.kv_a_norm, &m.kv_b_proj, &m.o_proj};
}

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
    const LightningWeights& lw = L.lightning;
    n += static_cast<size_t>(lw.qkv_proj.numel() + lw.output_gate.numel() + lw.norm.numel() +
                             lw.out_proj.numel());
    const RingAttentionWeights& r = L.ring;
    n += static_cast<size_t>(r.qkv.numel() + r.dense.numel() + r.q_norm.numel() + r.k_norm.numel() +
                             r.g_proj.numel() + r.g_norm.numel());
    for (const Tensor* t : kda_tensors(L.kda)) n += static_cast<size_t>(t->numel());
    for (const Tensor* t : mla_tensors(L.mla)) n += static_cast<size_t>(t->numel());
    n += mlp_count(L.mlp);
    n += static_cast<size_t>(L.moe.router.numel() + L.moe.router_bias.numel() +
                             L.moe.shared_expert_gate.numel());
    for (const MlpWeights& e : L.moe.experts) n += mlp_count(e);
    n += mlp_count(L.moe.shared_expert);
  }
  return n;
}

size_t ModelWeights::bytes() const {
  size_t n = parameter_count() * sizeof(float);
  // The bf16 matrices take 2 bytes per value less.
  for (Tensor* m : linear_matrices(const_cast<ModelWeights&>(*this)))
    n -= static_cast<size_t>(m->numel()) * (sizeof(float) - dtype_size(m->dtype()));
  return n;
}

std::vector<Tensor*> projection_matrices(ModelWeights& w) {
  std::vector<Tensor*> out;
  auto add = [&out](Tensor& t) {
    if (t.rank() > 0 && !t.empty()) out.push_back(&t);
  };
  auto mlp = [&add](MlpWeights& m) {
    add(m.gate_up);
    add(m.down);
  };
  add(w.embed);
  add(w.lm_head);
  for (LayerWeights& L : w.layers) {
    for (Tensor* t : {&L.linear.in_proj, &L.linear.out_proj, &L.attn.q_proj, &L.attn.k_proj,
                      &L.attn.v_proj, &L.attn.o_proj})
      add(*t);
    mlp(L.mlp);
    for (MlpWeights& e : L.moe.experts) mlp(e);
    mlp(L.moe.shared_expert);
  }
  return out;
}

std::vector<Tensor*> linear_matrices(ModelWeights& w) {
  std::vector<Tensor*> out = projection_matrices(w);
  for (LayerWeights& L : w.layers)
    for (Tensor* t : {&L.kda.qkv, &L.kda.f_a, &L.kda.g_a, &L.kda.f_b, &L.kda.g_b, &L.kda.b_proj,
                      &L.kda.o_proj, &L.lightning.qkv_proj, &L.lightning.output_gate,
                      &L.lightning.out_proj, &L.mla.q_proj, &L.mla.q_a_proj, &L.mla.q_b_proj,
                      &L.mla.kv_a_proj, &L.mla.o_proj, &L.ring.qkv, &L.ring.g_proj, &L.ring.dense})
      if (t->rank() > 0 && !t->empty()) out.push_back(t);
  return out;
}

const float* f32(const Tensor& t) {
  HYPIC_REQUIRE(t.dtype() == DType::F32,
                std::string("expected an f32 tensor, got ") + dtype_name(t.dtype()));
  return static_cast<const float*>(t.raw());
}

float* f32(Tensor& t) {
  HYPIC_REQUIRE(t.dtype() == DType::F32,
                std::string("expected an f32 tensor, got ") + dtype_name(t.dtype()));
  return static_cast<float*>(t.raw());
}

namespace {
void upload(Tensor& t, const kernels::Backend& be) {
  // A default tensor (a weight this layer kind has not) stays as it is.
  if (t.rank() > 0 && t.device() != be.device()) t = t.to(be.device(), &be);
}
void upload(MlpWeights& m, const kernels::Backend& be) {
  upload(m.gate_up, be);
  upload(m.down, be);
}
}  // namespace

ModelWeights to_backend(ModelWeights w, const kernels::Backend& be) {
  if (be.device() == Device::Host) return w;
  if (be.tensor_core_products())
    for (Tensor* m : linear_matrices(w)) {
      if (m->dtype() != DType::F32 || m->device() != Device::Host) continue;
      Tensor rounded(m->shape(), DType::BF16, Device::Host);
      auto* dst = static_cast<uint16_t*>(rounded.raw());
      const float* src = m->data();
      for (int64_t i = 0; i < m->numel(); ++i) dst[i] = f32_to_bf16(src[i]);
      *m = std::move(rounded);
    }
  upload(w.embed, be);
  upload(w.final_norm, be);
  upload(w.lm_head, be);
  for (LayerWeights& L : w.layers) {
    upload(L.input_norm, be);
    upload(L.post_attn_norm, be);
    for (Tensor* t : {&L.linear.in_proj, &L.linear.conv1d, &L.linear.dt_bias, &L.linear.A_log,
                      &L.linear.norm, &L.linear.out_proj, &L.attn.q_proj, &L.attn.k_proj,
                      &L.attn.v_proj, &L.attn.o_proj, &L.attn.q_norm, &L.attn.k_norm, &L.moe.router,
                      &L.moe.router_bias, &L.moe.shared_expert_gate})
      upload(*t, be);
    for (Tensor* t : {&L.lightning.qkv_proj, &L.lightning.output_gate, &L.lightning.norm,
                      &L.lightning.out_proj, &L.ring.qkv, &L.ring.dense, &L.ring.q_norm,
                      &L.ring.k_norm, &L.ring.g_proj, &L.ring.g_norm})
      upload(*t, be);
    for (const Tensor* t : kda_tensors(L.kda)) upload(const_cast<Tensor&>(*t), be);
    for (const Tensor* t : mla_tensors(L.mla)) upload(const_cast<Tensor&>(*t), be);
    upload(L.mlp, be);
    for (MlpWeights& e : L.moe.experts) upload(e, be);
    upload(L.moe.shared_expert, be);
  }
  return w;
}

}  // namespace hypic::model
