// Hugging Face model folders <-> canonical weights (see checkpoint.hpp).
//
// Every tensor of the Hugging Face layout is described once, by a Slot: its name, its
// shape, and where its values live in the canonical ModelWeights (a tensor, or a set of
// rows of one). Loading fills the slots from the checkpoint; saving reads them back out.
#include "model/checkpoint.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include <sys/resource.h>

#include "common/files.hpp"
#include "hypic/error.hpp"

namespace hypic::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Where a Hugging Face tensor lives in the canonical weights.
struct Slot {
  HfTensor hf;
  // Canonical tensor that receives the values (already allocated), and the mapping:
  // when `rows` is empty the whole tensor is copied (same element count); otherwise
  // source row i goes to canonical row rows[i] (2-D, same column count). `expert_stack`
  // marks Hugging Face's fused [E, ...] expert tensors: slice e goes to experts[e].
  std::function<Tensor*(ModelWeights&)> target;
  std::vector<int64_t> rows;
  int stacked = 0;  // > 0: fused expert stack of this many experts (layer `layer`)
  bool stacked_gate_up = false;
  int layer = -1;
};

// Values in place, in any float dtype: a checkpoint's mapped bytes or a tensor's memory.
struct Values {
  const unsigned char* bytes = nullptr;
  DType dtype = DType::F32;
};
Values values_of(const Tensor& t) {
  return {static_cast<const unsigned char*>(t.raw()), t.dtype()};
}

// dst[dst_at … + n) = src[src_at … + n), converted to dst's dtype (f32 or bf16): a plain copy
// when the dtypes agree, so bf16 weights stay bit for bit what the checkpoint holds.
void copy_values(Tensor& dst, size_t dst_at, const Values& src, size_t src_at, size_t n) {
  if (n == 0) return;
  unsigned char* out = static_cast<unsigned char*>(dst.raw()) + dst_at * dtype_size(dst.dtype());
  const unsigned char* in = src.bytes + src_at * dtype_size(src.dtype);
  if (src.dtype == dst.dtype()) {
    std::memcpy(out, in, n * dtype_size(src.dtype));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float v;
    if (src.dtype == DType::F32) {
      std::memcpy(&v, in + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      v = src.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    if (dst.dtype() == DType::F32) {
      std::memcpy(out + 4 * i, &v, 4);
    } else {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

// When `rows` lists a multiple of the source's rows (src_rows), each source row fills that many
// consecutive entries (a per-head value the canonical layout repeats per channel).
void copy_rows_in(Tensor& dst, const Values& src, int64_t cols, int64_t src_rows,
                  const std::vector<int64_t>& rows) {
  const size_t repeat = src_rows > 0 ? rows.size() / static_cast<size_t>(src_rows) : 1;
  for (size_t i = 0; i < rows.size(); ++i)
    copy_values(dst, static_cast<size_t>(rows[i] * cols), src,
                (i / repeat) * static_cast<size_t>(cols), static_cast<size_t>(cols));
}

// dst has the checkpoint's shape; its last dimension is the row length (a 1-D canonical tensor
// read per element, such as KDA's A_log, has rows of 1).
void copy_rows_out(Tensor& dst, const Tensor& src, const std::vector<int64_t>& rows) {
  const int64_t cols = dst.dim(-1);
  const size_t repeat = rows.size() / static_cast<size_t>(dst.numel() / cols);
  for (size_t i = 0; i < rows.size(); i += repeat)
    copy_values(dst, (i / repeat) * static_cast<size_t>(cols), values_of(src),
                static_cast<size_t>(rows[i] * cols), static_cast<size_t>(cols));
}

std::vector<int64_t> iota_rows(int64_t begin, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = begin + i;
  return r;
}

// Allocates every canonical tensor with its final shape (values zero); the projection matrices
// in `matrix_dtype` (f32 or bf16).
ModelWeights allocate(const ModelConfig& c, DType matrix_dtype = DType::F32) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const int64_t Hv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  const int64_t conv = c.linear_conv_dim(), vd = c.linear_value_dim();
  const int64_t hd = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  // A projection matrix: in matrix_dtype from the start, so no f32 copy of the model is made.
  auto mat = [matrix_dtype](int64_t rows, int64_t cols) {
    return matrix_dtype == DType::F32 ? Tensor({rows, cols})
                                      : Tensor({rows, cols}, matrix_dtype, Device::Host);
  };
  ModelWeights w;
  w.embed = mat(V, H);
  w.final_norm = Tensor({H});
  if (!c.tie_word_embeddings) w.lm_head = mat(V, H);
  auto mlp = [H, &mat](int64_t I) {
    MlpWeights m;
    m.gate_up = mat(2 * I, H);
    m.down = mat(H, I);
    return m;
  };
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w.layers[static_cast<size_t>(i)];
    L.kind = c.layer_types[static_cast<size_t>(i)];
    L.input_norm = Tensor({H});
    L.post_attn_norm = Tensor({H});
    if (L.kind == LayerKind::Lightning) {
      L.lightning.qkv_proj = Tensor({3 * Hq * hd, H});
      L.lightning.output_gate = Tensor({Hq * hd, H});
      L.lightning.norm = Tensor({Hq * hd});
      L.lightning.out_proj = Tensor({H, Hq * hd});
    } else if (L.kind == LayerKind::Kda) {
      const int64_t P = c.linear_key_dim(), d = c.linear_key_head_dim;
      const int64_t Hk = c.linear_num_key_heads;
      L.kda.qkv = Tensor({3 * P, H});
      L.kda.conv1d = Tensor({3 * P, static_cast<int64_t>(c.linear_conv_kernel_dim)});
      L.kda.f_a = Tensor({d, H});
      L.kda.f_b = Tensor({P, d});
      L.kda.A_log = Tensor({P});
      L.kda.dt_bias = Tensor({P});
      L.kda.b_proj = Tensor({Hk, H});
      L.kda.g_a = Tensor({d, H});
      L.kda.g_b = Tensor({P, d});
      L.kda.o_norm = Tensor({d});
      L.kda.o_proj = Tensor({H, P});
    } else if (L.kind == LayerKind::Mla) {
      const int64_t dq = c.qk_nope_head_dim + c.qk_rope_head_dim, r = c.kv_lora_rank;
      if (c.q_lora_rank > 0) {
        L.mla.q_a_proj = Tensor({static_cast<int64_t>(c.q_lora_rank), H});
        L.mla.q_a_norm = Tensor({static_cast<int64_t>(c.q_lora_rank)});
        L.mla.q_b_proj = Tensor({Hq * dq, static_cast<int64_t>(c.q_lora_rank)});
      } else {
        L.mla.q_proj = Tensor({Hq * dq, H});
      }
      L.mla.kv_a_proj = Tensor({r + c.qk_rope_head_dim, H});
      L.mla.kv_a_norm = Tensor({r});
      L.mla.kv_b_proj = Tensor({Hq * (c.qk_nope_head_dim + c.v_head_dim), r});
      L.mla.o_proj = Tensor({H, Hq * c.v_head_dim});
    } else if (L.kind == LayerKind::Linear) {
      L.linear.in_proj = mat(conv + vd + 2 * Hv, H);
      L.linear.conv1d = Tensor({conv, static_cast<int64_t>(c.linear_conv_kernel_dim)});
      L.linear.dt_bias = Tensor({Hv});
      L.linear.A_log = Tensor({Hv});
      L.linear.norm = Tensor({dv});
      L.linear.out_proj = mat(H, vd);
    } else if (c.arch_spec().bailing_layout()) {  // Ring: fused q|k|v, plain q/k norms
      const int64_t kv = L.kind == LayerKind::RingLinear ? Hq : Hkv;
      L.ring.qkv = Tensor({(Hq + 2 * kv) * hd, H});
      L.ring.dense = Tensor({H, Hq * hd});
      if (c.use_qk_norm) {
        L.ring.q_norm = Tensor({hd});
        L.ring.k_norm = Tensor({hd});
      }
      if (L.kind == LayerKind::RingLinear) {
        L.ring.g_proj = Tensor({Hq * hd, H});
        L.ring.g_norm = Tensor({Hq * hd});
      }
    } else {
      L.attn.q_proj = mat((c.attention_output_gate ? 2 : 1) * Hq * hd, H);
      L.attn.k_proj = mat(Hkv * hd, H);
      L.attn.v_proj = mat(Hkv * hd, H);
      L.attn.o_proj = mat(H, Hq * hd);
      if (c.attention_qk_norm) {
        L.attn.q_norm = Tensor({hd});
        L.attn.k_norm = Tensor({hd});
      }
    }
    L.is_moe = c.layer_is_moe(i);
    if (L.is_moe) {
      const ArchSpec::MoeNames names = c.arch_spec().moe_names();
      L.moe.router = Tensor({static_cast<int64_t>(c.num_experts), H});
      if (!names.router_bias.empty())
        L.moe.router_bias = Tensor({static_cast<int64_t>(c.num_experts)});
      for (int e = 0; e < c.num_experts; ++e) L.moe.experts.push_back(mlp(c.moe_intermediate_size));
      if (c.shared_expert_intermediate_size > 0) {
        L.moe.shared_expert = mlp(c.shared_expert_intermediate_size);
        if (!names.shared_gate.empty()) L.moe.shared_expert_gate = Tensor({1, H});
      }
    } else {
      L.mlp = mlp(c.intermediate_size);
    }
  }
  return w;
}

// The tensor slots of a config. `prefix` is one of the architecture's weight prefixes;
// `fused_experts` describes experts as Hugging Face's in-memory [E, ...] stacks. `with_rows`
// false leaves out the row maps (for counting parameters: names and shapes only).
std::vector<Slot> build_slots(const ModelConfig& c, const std::string& prefix, bool fused_experts,
                              bool with_rows = true) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const int64_t Hv = c.linear_num_value_heads;
  const int64_t dv = c.linear_value_head_dim;
  const int64_t vd = c.linear_value_dim(), conv = c.linear_conv_dim();
  const int64_t hd = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t K = c.linear_conv_kernel_dim;

  std::vector<Slot> slots;
  auto rows_of = [with_rows](int64_t begin, int64_t n) {
    return with_rows ? iota_rows(begin, n) : std::vector<int64_t>{};
  };
  const ArchSpec& spec = c.arch_spec();
  auto add = [&](std::string name, std::vector<int64_t> shape,
                 std::function<Tensor*(ModelWeights&)> target, std::vector<int64_t> rows = {}) {
    Slot s;
    s.hf = {spec.tensor_name(name), std::move(shape)};
    s.target = std::move(target);
    s.rows = std::move(rows);
    slots.push_back(std::move(s));
  };
  // The architecture names and orders the tensors that make up a linear layer's in_proj.
  const std::vector<InProjPart> in_proj_parts = c.arch_spec().linear_in_proj(c);

  const bool bailing = c.arch_spec().bailing_layout();
  add(prefix + (bailing ? "word_embeddings.weight" : "embed_tokens.weight"), {V, H},
      [](ModelWeights& w) { return &w.embed; });
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const size_t li = static_cast<size_t>(i);
    const std::string L = prefix + "layers." + std::to_string(i) + ".";
    add(L + "input_layernorm.weight", {H},
        [li](ModelWeights& w) { return &w.layers[li].input_norm; });
    add(L + "post_attention_layernorm.weight", {H},
        [li](ModelWeights& w) { return &w.layers[li].post_attn_norm; });
    if (c.layer_types[li] == LayerKind::Lightning) {
      const std::string A = L + "self_attn.";
      add(A + "qkv_proj.weight", {3 * Hq * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].lightning.qkv_proj; });
      add(A + "output_gate.weight", {Hq * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].lightning.output_gate; });
      add(A + "norm.weight", {Hq * hd},
          [li](ModelWeights& w) { return &w.layers[li].lightning.norm; });
      add(A + "out_proj.weight", {H, Hq * hd},
          [li](ModelWeights& w) { return &w.layers[li].lightning.out_proj; });
    } else if (c.layer_types[li] == LayerKind::Kda) {  // kimi_linear's names
      const std::string A = L + "self_attn.";
      const int64_t P = c.linear_key_dim(), d = c.linear_key_head_dim;
      const int64_t Hk = c.linear_num_key_heads;
      auto kda = [li](Tensor KdaWeights::*m) {
        return [li, m](ModelWeights& w) { return &(w.layers[li].kda.*m); };
      };
      const char* proj[] = {"q", "k", "v"};
      for (int64_t j = 0; j < 3; ++j) {
        add(A + proj[j] + "_proj.weight", {P, H}, kda(&KdaWeights::qkv), rows_of(j * P, P));
        add(A + proj[j] + "_conv1d.weight", {P, 1, K}, kda(&KdaWeights::conv1d), rows_of(j * P, P));
      }
      add(A + "f_a_proj.weight", {d, H}, kda(&KdaWeights::f_a));
      add(A + "f_b_proj.weight", {P, d}, kda(&KdaWeights::f_b));
      add(A + "A_log", {1, 1, Hk, 1}, kda(&KdaWeights::A_log), rows_of(0, P));  // per channel
      add(A + "dt_bias", {P}, kda(&KdaWeights::dt_bias));
      add(A + "b_proj.weight", {Hk, H}, kda(&KdaWeights::b_proj));
      add(A + "g_a_proj.weight", {d, H}, kda(&KdaWeights::g_a));
      add(A + "g_b_proj.weight", {P, d}, kda(&KdaWeights::g_b));
      add(A + "o_norm.weight", {d}, kda(&KdaWeights::o_norm));
      add(A + "o_proj.weight", {H, P}, kda(&KdaWeights::o_proj));
    } else if (c.layer_types[li] == LayerKind::Mla) {
      const std::string A = L + "self_attn.";
      const int64_t dq = c.qk_nope_head_dim + c.qk_rope_head_dim, r = c.kv_lora_rank;
      const int64_t qr = c.q_lora_rank;
      auto mla = [li](Tensor MlaWeights::*m) {
        return [li, m](ModelWeights& w) { return &(w.layers[li].mla.*m); };
      };
      if (qr > 0) {
        add(A + "q_a_proj.weight", {qr, H}, mla(&MlaWeights::q_a_proj));
        add(A + "q_a_layernorm.weight", {qr}, mla(&MlaWeights::q_a_norm));
        add(A + "q_b_proj.weight", {Hq * dq, qr}, mla(&MlaWeights::q_b_proj));
      } else {
        add(A + "q_proj.weight", {Hq * dq, H}, mla(&MlaWeights::q_proj));
      }
      add(A + "kv_a_proj_with_mqa.weight", {r + c.qk_rope_head_dim, H},
          mla(&MlaWeights::kv_a_proj));
      add(A + "kv_a_layernorm.weight", {r}, mla(&MlaWeights::kv_a_norm));
      add(A + "kv_b_proj.weight", {Hq * (c.qk_nope_head_dim + c.v_head_dim), r},
          mla(&MlaWeights::kv_b_proj));
      add(A + "o_proj.weight", {H, Hq * c.v_head_dim}, mla(&MlaWeights::o_proj));
    } else if (c.layer_types[li] == LayerKind::Linear) {
      const std::string A = L + "linear_attn.";
      auto in_proj = [li](ModelWeights& w) { return &w.layers[li].linear.in_proj; };
      for (const InProjPart& part : in_proj_parts)
        add(A + part.name, {static_cast<int64_t>(part.rows.size()), H}, in_proj,
            with_rows ? part.rows : std::vector<int64_t>{});
      add(A + "conv1d.weight", {conv, 1, K},
          [li](ModelWeights& w) { return &w.layers[li].linear.conv1d; });
      add(A + "dt_bias", {Hv}, [li](ModelWeights& w) { return &w.layers[li].linear.dt_bias; });
      add(A + "A_log", {Hv}, [li](ModelWeights& w) { return &w.layers[li].linear.A_log; });
      add(A + "norm.weight", {dv}, [li](ModelWeights& w) { return &w.layers[li].linear.norm; });
      add(A + "out_proj.weight", {H, vd},
          [li](ModelWeights& w) { return &w.layers[li].linear.out_proj; });
    } else if (bailing) {
      const std::string A = L + "attention.";
      const bool lin = c.layer_types[li] == LayerKind::RingLinear;
      const int64_t kv = lin ? Hq : Hkv;
      add(A + "query_key_value.weight", {(Hq + 2 * kv) * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].ring.qkv; });
      add(A + "dense.weight", {H, Hq * hd},
          [li](ModelWeights& w) { return &w.layers[li].ring.dense; });
      if (c.use_qk_norm) {
        add(A + "query_layernorm.weight", {hd},
            [li](ModelWeights& w) { return &w.layers[li].ring.q_norm; });
        add(A + "key_layernorm.weight", {hd},
            [li](ModelWeights& w) { return &w.layers[li].ring.k_norm; });
      }
      if (lin) {
        add(A + "g_proj.weight", {Hq * hd, H},
            [li](ModelWeights& w) { return &w.layers[li].ring.g_proj; });
        add(A + "g_norm.weight", {Hq * hd},
            [li](ModelWeights& w) { return &w.layers[li].ring.g_norm; });
      }
    } else {
      const std::string A = L + "self_attn.";
      add(A + "q_proj.weight", {(c.attention_output_gate ? 2 : 1) * Hq * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].attn.q_proj; });
      add(A + "k_proj.weight", {Hkv * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].attn.k_proj; });
      add(A + "v_proj.weight", {Hkv * hd, H},
          [li](ModelWeights& w) { return &w.layers[li].attn.v_proj; });
      add(A + "o_proj.weight", {H, Hq * hd},
          [li](ModelWeights& w) { return &w.layers[li].attn.o_proj; });
      if (c.attention_qk_norm) {
        add(A + "q_norm.weight", {hd}, [li](ModelWeights& w) { return &w.layers[li].attn.q_norm; });
        add(A + "k_norm.weight", {hd}, [li](ModelWeights& w) { return &w.layers[li].attn.k_norm; });
      }
    }
    // A SwiGLU block named `M` whose canonical weights `get` returns.
    // `proj`: the gate, up and down projections' tensor names.
    auto add_mlp = [&](const std::string& M, int64_t I,
                       std::function<MlpWeights*(ModelWeights&)> get,
                       const std::vector<std::string>& proj) {
      add(
          M + proj[0], {I, H}, [get](ModelWeights& w) { return &get(w)->gate_up; }, rows_of(0, I));
      add(
          M + proj[1], {I, H}, [get](ModelWeights& w) { return &get(w)->gate_up; }, rows_of(I, I));
      add(M + proj[2], {H, I}, [get](ModelWeights& w) { return &get(w)->down; });
    };
    const std::vector<std::string> plain = {"gate_proj.weight", "up_proj.weight",
                                            "down_proj.weight"};
    if (c.layer_is_moe(i)) {
      const ArchSpec::MoeNames names = c.arch_spec().moe_names();
      const std::string M = L + names.block;
      const int64_t E = c.num_experts, I = c.moe_intermediate_size;
      add(M + "gate.weight", {E, H}, [li](ModelWeights& w) { return &w.layers[li].moe.router; });
      if (!names.router_bias.empty())
        add(M + names.router_bias, {E},
            [li](ModelWeights& w) { return &w.layers[li].moe.router_bias; });
      if (fused_experts) {
        for (int which = 0; which < 2; ++which) {
          Slot s;
          s.hf = which == 0 ? HfTensor{spec.tensor_name(M + "experts.gate_up_proj"), {E, 2 * I, H}}
                            : HfTensor{spec.tensor_name(M + "experts.down_proj"), {E, H, I}};
          s.stacked = static_cast<int>(E);
          s.stacked_gate_up = which == 0;
          s.layer = i;
          slots.push_back(std::move(s));
        }
      } else {
        for (int e = 0; e < c.num_experts; ++e) {
          const size_t ei = static_cast<size_t>(e);
          add_mlp(
              M + "experts." + std::to_string(e) + ".", I,
              [li, ei](ModelWeights& w) { return &w.layers[li].moe.experts[ei]; },
              c.arch_spec().expert_projections());
        }
      }
      if (c.shared_expert_intermediate_size > 0) {
        add_mlp(
            M + names.shared, c.shared_expert_intermediate_size,
            [li](ModelWeights& w) { return &w.layers[li].moe.shared_expert; }, plain);
        if (!names.shared_gate.empty())
          add(M + names.shared_gate, {1, H},
              [li](ModelWeights& w) { return &w.layers[li].moe.shared_expert_gate; });
      }
    } else {
      add_mlp(
          L + "mlp.", c.intermediate_size, [li](ModelWeights& w) { return &w.layers[li].mlp; },
          plain);
    }
  }
  add(prefix + "norm.weight", {H}, [](ModelWeights& w) { return &w.final_norm; });
  if (!c.tie_word_embeddings)
    add("lm_head.weight", {V, H}, [](ModelWeights& w) { return &w.lm_head; });
  return slots;
}

std::string save_prefix(const ModelConfig& c) {
  return c.arch_spec().weight_prefixes().front();
}

// Fills the slot's canonical values from `src` (the slot's Hugging Face shape, any float dtype).
void put(const Slot& s, ModelWeights& w, const Values& src) {
  const int64_t numel = static_cast<int64_t>(Tensor::count(s.hf.shape));
  if (s.stacked > 0) {
    auto& L = w.layers[static_cast<size_t>(s.layer)];
    const int64_t per = numel / s.stacked;
    for (int e = 0; e < s.stacked; ++e) {
      Tensor& dst = s.stacked_gate_up ? L.moe.experts[static_cast<size_t>(e)].gate_up
                                      : L.moe.experts[static_cast<size_t>(e)].down;
      copy_values(dst, 0, src, static_cast<size_t>(e * per), static_cast<size_t>(per));
    }
    return;
  }
  Tensor* dst = s.target(w);
  if (s.rows.empty()) {
    HYPIC_REQUIRE(dst->numel() == numel, "internal: canonical tensor for '" + s.hf.name +
                                             "' has shape " + dst->shape_str());
    copy_values(*dst, 0, src, 0, static_cast<size_t>(numel));
  } else {
    copy_rows_in(*dst, src, s.hf.shape.back(), numel / s.hf.shape.back(), s.rows);
  }
}
void put(const Slot& s, ModelWeights& w, const Tensor& src) {
  put(s, w, values_of(src));
}

Tensor get(const Slot& s, const ModelWeights& w_const) {
  auto& w = const_cast<ModelWeights&>(w_const);  // target() only hands out a pointer
  Tensor out(s.hf.shape);
  if (s.stacked > 0) {
    const auto& L = w.layers[static_cast<size_t>(s.layer)];
    const int64_t per = out.numel() / s.stacked;
    for (int e = 0; e < s.stacked; ++e) {
      const Tensor& src = s.stacked_gate_up ? L.moe.experts[static_cast<size_t>(e)].gate_up
                                            : L.moe.experts[static_cast<size_t>(e)].down;
      copy_values(out, static_cast<size_t>(e * per), values_of(src), 0, static_cast<size_t>(per));
    }
    return out;
  }
  const Tensor* src = s.target(w);
  if (s.rows.empty()) {
    HYPIC_REQUIRE(src->numel() == out.numel(), "internal: canonical tensor for '" + s.hf.name +
                                                   "' has shape " + src->shape_str());
    copy_values(out, 0, values_of(*src), 0, static_cast<size_t>(out.numel()));
  } else {
    copy_rows_out(out, *src, s.rows);
  }
  return out;
}

bool has_prefix(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

bool has_suffix(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::BF16:
      return "bfloat16";
    case DType::F16:
      return "float16";
    default:
      return "float32";
  }
}

json read_json_file(const fs::path& p) {
  check_config_file_size(p.string());
  const std::string text = read_regular_file(p.string(), "model file");  // read errors too
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace

ModelWeights zero_weights(const ModelConfig& c, DType matrix_dtype) {
  return allocate(c, matrix_dtype);
}

namespace {
WeightsDType& default_weights_dtype_ref() {
  static WeightsDType d = WeightsDType::Auto;
  return d;
}
}  // namespace

WeightsDType parse_weights_dtype(const std::string& s) {
  if (s == "auto") return WeightsDType::Auto;
  if (s == "f32") return WeightsDType::F32;
  if (s == "bf16") return WeightsDType::BF16;
  throw Error("--weights-dtype must be f32, bf16 or auto, not '" + s + "'");
}

void set_default_weights_dtype(WeightsDType d) {
  default_weights_dtype_ref() = d;
}

WeightsDType default_weights_dtype() {
  return default_weights_dtype_ref();
}

uint64_t peak_resident_bytes() {
  // VmHWM: the resident set's high-water mark, file pages (a mapped checkpoint) included.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (has_prefix(line, "VmHWM:")) return std::stoull(line.substr(6)) * 1024;
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // Linux: kilobytes
}

std::string load_summary(const LoadedModel& m) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "weights: %s in memory (%.2f GB; checkpoint %s, %.2f GB), peak memory after "
                "loading %.2f GB",
                m.weights_dtype.c_str(), static_cast<double>(m.weights.bytes()) / 1e9,
                m.dtype.c_str(), static_cast<double>(m.checkpoint_bytes) / 1e9,
                static_cast<double>(m.peak_memory_bytes) / 1e9);
  return buf;
}

std::vector<HfTensor> hf_tensor_layout(const ModelConfig& config) {
  std::vector<HfTensor> out;
  for (const Slot& s : build_slots(config, save_prefix(config), false)) out.push_back(s.hf);
  return out;
}

uint64_t hf_parameter_count(const ModelConfig& config) {
  // Experts as fused stacks: a handful of slots per layer, whatever the expert count.
  // 64-bit products and sums that report overflow (the shapes are bounded per field, their
  // products are not).
  uint64_t n = 0;
  bool overflow = false;
  for (const Slot& s : build_slots(config, save_prefix(config), true, false)) {
    uint64_t count = 1;
    for (int64_t d : s.hf.shape)
      overflow |= d < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(d), &count);
    overflow |= __builtin_add_overflow(n, count, &n);
  }
  constexpr uint64_t kMaxParameters = 1ull << 50;  // about 1.1e15 (docs/input-checks.md)
  HYPIC_REQUIRE(!overflow && n <= kMaxParameters,
                "config: the sizes give more than 2^50 parameters (num_hidden_layers x "
                "num_experts x hidden_size x moe_intermediate_size ...); no machine holds that");
  return n;
}

ModelWeights weights_from_hf(const ModelConfig& config,
                             const std::function<Tensor(const HfTensor&)>& produce) {
  ModelWeights w = allocate(config);
  for (const Slot& s : build_slots(config, save_prefix(config), false)) {
    const Tensor t = produce(s.hf);
    HYPIC_REQUIRE(t.shape() == s.hf.shape, "internal: produced tensor '" + s.hf.name +
                                               "' has shape " + t.shape_str() + ", expected " +
                                               shape_to_string(s.hf.shape));
    put(s, w, t);
  }
  return w;
}

void check_config_file_size(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return;  // not a regular file, or unreadable: the reader says so
  HYPIC_REQUIRE(size <= kMaxConfigFileBytes,
                path + ": " + std::to_string(size) + " bytes, more than the " +
                    std::to_string(kMaxConfigFileBytes >> 20) +
                    " MiB a config.json may hold (a published one is a few kB)");
}

ModelConfig load_config(const std::string& dir) {
  const fs::path p = fs::path(dir) / "config.json";
  HYPIC_REQUIRE(fs::is_directory(dir), dir + ": model folder does not exist");
  HYPIC_REQUIRE(fs::exists(p), dir + ": no config.json in the model folder");
  const json root = read_json_file(p);  // its errors name the path already
  try {
    return ModelConfig::from_json(root);
  } catch (const Error& e) {
    std::string msg = e.what();
    // from_json names "config.json"; give the full path instead.
    if (has_prefix(msg, "config.json: ")) msg = msg.substr(13);
    if (has_prefix(msg, "config: ")) msg = msg.substr(8);
    throw Error(p.string() + ": " + msg);
  }
}

LoadedModel load_checkpoint(const std::string& dir) {
  return load_checkpoint(dir, default_weights_dtype());
}

LoadedModel load_checkpoint(const std::string& dir, WeightsDType weights_dtype) {
  LoadedModel out;
  out.dir = dir;
  out.config = load_config(dir);
  const ModelConfig& c = out.config;
  const SafetensorsCheckpoint ckpt(dir);
  out.sharded = ckpt.sharded();
  const std::vector<std::string> names = ckpt.names();
  const std::set<std::string> present(names.begin(), names.end());

  // The architecture settles what config.json leaves open (e.g. which of two
  // tie_word_embeddings flags holds) and where the decoder's tensors sit. Experts may be one
  // tensor per expert (checkpoints) or fused stacks (transformers' in-memory form).
  c.arch_spec().adjust_loaded_config(read_json_file(fs::path(dir) / "config.json"), present,
                                     out.config);
  const std::vector<std::string> prefixes = c.arch_spec().weight_prefixes();
  std::string prefix = prefixes.back();
  for (const std::string& p : prefixes) {
    if (present.count(p + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  bool fused = false;
  for (const std::string& n : names) fused = fused || has_suffix(n, ".experts.gate_up_proj");
  std::vector<Slot> slots = build_slots(c, prefix, fused);
  for (Slot& s : slots)  // a tensor stored under another name the architecture accepts
    if (!present.count(s.hf.name))
      for (const std::string& alias : c.arch_spec().tensor_aliases(s.hf.name))
        if (present.count(alias)) {
          s.hf.name = alias;
          break;
        }

  // Check everything before reading anything; report the first problem, count the rest.
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const Slot& s : slots) {
    expected.insert(s.hf.name);
    if (!present.count(s.hf.name)) {
      problems.push_back(dir + ": tensor '" + s.hf.name + "' (expected shape " +
                         shape_to_string(s.hf.shape) + ") is missing from the checkpoint");
      continue;
    }
    const TensorInfo& info = ckpt.info(s.hf.name);
    if (info.shape != s.hf.shape) {
      problems.push_back(ckpt.file_of(s.hf.name) + ": tensor '" + s.hf.name + "' has shape " +
                         info.shape_str() + ", expected " + shape_to_string(s.hf.shape) +
                         " from config.json");
    } else if (!dtype_is_float(info.dtype)) {
      problems.push_back(ckpt.file_of(s.hf.name) + ": tensor '" + s.hf.name + "' has dtype " +
                         safetensors_dtype_name(info.dtype) + ", expected BF16, F16 or F32");
    }
  }
  const std::vector<std::string> ignored_prefixes = c.arch_spec().ignored_prefixes();
  const std::vector<std::string> ignored_suffixes = c.arch_spec().ignored_suffixes();
  for (const std::string& n : names) {
    if (expected.count(n)) continue;
    bool ignorable = std::any_of(ignored_prefixes.begin(), ignored_prefixes.end(),
                                 [&](const std::string& p) { return has_prefix(n, p); });
    ignorable = ignorable || has_suffix(n, ".rotary_emb.inv_freq");
    ignorable = ignorable || std::any_of(ignored_suffixes.begin(), ignored_suffixes.end(),
                                         [&](const std::string& s) { return has_suffix(n, s); });
    ignorable = ignorable || (c.tie_word_embeddings && n == "lm_head.weight");
    if (ignorable) {
      out.ignored.push_back(n);
    } else {
      problems.push_back(ckpt.file_of(n) + ": unexpected tensor '" + n + "' (not part of a " +
                         arch_name(c.arch) + " model with this config.json)");
    }
  }
  if (!problems.empty()) {
    std::string msg = problems.front();
    if (problems.size() > 1)
      msg += " (and " + std::to_string(problems.size() - 1) + " more problem" +
             (problems.size() > 2 ? "s" : "") + ")";
    throw Error(msg);
  }

  std::set<std::string> dtypes;
  for (const Slot& s : slots) dtypes.insert(dtype_name(ckpt.info(s.hf.name).dtype));
  // The projections (what the products read) stay bf16 when asked, or by default when the
  // checkpoint stores them all in bf16; norms, gates, conv kernels and the router stay f32.
  bool matrices_bf16 = weights_dtype != WeightsDType::F32;
  out.weights = allocate(c, matrices_bf16 ? DType::BF16 : DType::F32);
  if (weights_dtype == WeightsDType::Auto) {
    // A projection (a bf16 tensor here) fed by a non-bf16 tensor: widen them all instead.
    for (const Slot& s : slots) {
      const Tensor* dst =
          s.stacked > 0 ? &out.weights.layers[static_cast<size_t>(s.layer)].moe.experts[0].gate_up
                        : s.target(out.weights);
      if (dst->dtype() == DType::BF16 && ckpt.info(s.hf.name).dtype != DType::BF16)
        matrices_bf16 = false;
    }
    if (!matrices_bf16) {
      out.weights = ModelWeights();  // freed before the f32 weights are allocated
      out.weights = allocate(c, DType::F32);
    }
  }
  out.weights_dtype = matrices_bf16 ? "bf16" : "f32";
  // Converted one tensor at a time from the mapped file, whose pages are then let go.
  for (const Slot& s : slots) {
    const TensorInfo& info = ckpt.info(s.hf.name);
    out.checkpoint_bytes += info.end - info.begin;
    put(s, out.weights, Values{ckpt.bytes(s.hf.name), info.dtype});
    ckpt.release(s.hf.name);
  }
  out.peak_memory_bytes = peak_resident_bytes();
  if (dtypes.size() == 1) {
    out.dtype = *dtypes.begin();
  } else {
    out.dtype = "mixed(";
    for (const std::string& d : dtypes) out.dtype += (out.dtype.back() == '(' ? "" : ",") + d;
    out.dtype += ")";
  }
  return out;
}

void save_checkpoint(const std::string& dir, const ModelConfig& config, const ModelWeights& weights,
                     DType dtype, uint64_t max_shard_bytes) {
  HYPIC_REQUIRE(dtype_is_float(dtype), std::string("cannot save weights as ") +
                                           safetensors_dtype_name(dtype) +
                                           " (supported: f32, bf16, f16)");
  config.validate();
  std::error_code ec;
  fs::create_directories(dir, ec);
  HYPIC_REQUIRE(!ec && fs::is_directory(dir), dir + ": cannot create the output folder");
  // Remove weights of an earlier save so that a stale file can never shadow this one.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n == "model.safetensors" || n == "model.safetensors.index.json" ||
        (has_prefix(n, "model-") && has_suffix(n, ".safetensors")))
      fs::remove(entry.path());
  }

  json cj = config.to_json();
  cj["dtype"] = torch_dtype_name(dtype);
  if (cj.contains("text_config")) cj["text_config"]["dtype"] = torch_dtype_name(dtype);
  {
    std::ofstream out(fs::path(dir) / "config.json");
    out << cj.dump(2) << "\n";
    HYPIC_REQUIRE(out.good(), dir + "/config.json: write failed");
  }

  const std::vector<Slot> slots =
      build_slots(config, save_prefix(config), config.arch_spec().saves_fused_experts());
  // Shards: consecutive slots until the byte budget is reached (at least one per shard).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const uint64_t b = Tensor::count(slots[i].hf.shape) * dtype_size(dtype);
    if (max_shard_bytes > 0 && !shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
    total += b;
  }
  auto write_shard = [&](const std::string& path, const std::vector<size_t>& members) {
    std::vector<TensorSpecOut> specs;
    for (size_t i : members) specs.push_back({slots[i].hf.name, slots[i].hf.shape});
    write_safetensors(path, specs, dtype,
                      [&](size_t k) { return get(slots[members[k]], weights); });
  };
  if (max_shard_bytes == 0) {
    write_shard((fs::path(dir) / "model.safetensors").string(), shards[0]);
    return;
  }
  json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = json::object();
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, n);
    write_shard((fs::path(dir) / name).string(), shards[s]);
    for (size_t i : shards[s]) index["weight_map"][slots[i].hf.name] = name;
  }
  std::ofstream out(fs::path(dir) / "model.safetensors.index.json");
  out << index.dump(2) << "\n";
  HYPIC_REQUIRE(out.good(), dir + "/model.safetensors.index.json: write failed");
}

}  // namespace hypic::model
