// Layer kinds of the forward pass. Large products go through kernels::linear / gemm with all
// T tokens at once; everything else is a host kernel over the whole block.
#include "model/layers.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "hypic/kernels/activation.hpp"
#include "hypic/kernels/attention.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/conv.hpp"
#include "hypic/kernels/linear_attention.hpp"
#include "hypic/kernels/moe.hpp"
#include "hypic/kernels/norm.hpp"
#include "hypic/kernels/rope.hpp"

namespace hypic::model {
namespace {
using Clock = std::chrono::steady_clock;

// Adds the seconds since construction (or the last lap) to a ForwardTimes field.
class Lap {
 public:
  Lap() : start_(Clock::now()) {}
  void to(double& field) {
    const auto now = Clock::now();
    field += std::chrono::duration<double>(now - start_).count();
    start_ = now;
  }

 private:
  Clock::time_point start_;
};

// dst[t, 0:cols] = src[t, offset : offset+cols] for a [T, ld] source.
void copy_columns(const float* src, int ld, int offset, float* dst, int T, int cols) {
  for (int t = 0; t < T; ++t)
    std::memcpy(dst + static_cast<size_t>(t) * cols, src + static_cast<size_t>(t) * ld + offset,
                sizeof(float) * static_cast<size_t>(cols));
}

// y = down(silu(gate(x)) · up(x)) into y (accumulating when asked); uses slots kG, kH.
void swiglu_mlp(const MlpWeights& w, const float* x, float* y, int T, int hidden, bool accumulate,
                Workspace& ws) {
  const int width = static_cast<int>(w.down.dim(1));
  float* gate_up = ws.floats(Workspace::kG, static_cast<size_t>(T) * 2 * width);
  float* act = ws.floats(Workspace::kH, static_cast<size_t>(T) * width);
  kernels::linear(x, w.gate_up.data(), gate_up, T, 2 * width, hidden);
  kernels::swiglu(gate_up, act, T, width);
  kernels::linear(act, w.down.data(), y, T, hidden, width, accumulate);
}
}  // namespace

double ForwardTimes::total() const {
  return embed_norms + gdn_proj + gdn_conv + gdn_prep + gdn_rule + gdn_out + attn_proj + attn_core +
         attn_out + mlp + moe_experts + moe_shared + lm_head;
}

float* Workspace::floats(Slot slot, size_t n) {
  std::vector<float>& b = buffers_[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

int* Workspace::ints(size_t n) {
  if (ints_.size() < n) ints_.resize(n);
  return ints_.data();
}

void gdn_layer(const ModelConfig& cfg, const GdnWeights& w, const float* x, float* out, int T,
               LayerCache& cache, Workspace& ws) {
  const int hidden = cfg.hidden_size;
  const int Hk = cfg.linear_num_key_heads, Hv = cfg.linear_num_value_heads;
  const int dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim;
  const int key_dim = Hk * dk, value_dim = Hv * dv, conv_dim = cfg.linear_conv_dim();
  const int K = cfg.linear_conv_kernel_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const size_t rows = static_cast<size_t>(T);
  Lap lap;

  // Projections: the conv channels (q|k|v), then z, then b|a, each one product.
  float* mixed = ws.floats(Workspace::kA, rows * conv_dim);
  float* z = ws.floats(Workspace::kF, rows * value_dim);
  float* gates = ws.floats(Workspace::kG, rows * 4 * Hv);  // b|a, then beta, then g
  const float* wp = w.in_proj.data();
  kernels::linear(x, wp, mixed, T, conv_dim, hidden);
  kernels::linear(x, wp + static_cast<size_t>(conv_dim) * hidden, z, T, value_dim, hidden);
  kernels::linear(x, wp + static_cast<size_t>(conv_dim + value_dim) * hidden, gates, T, 2 * Hv,
                  hidden);
  lap.to(ws.times.gdn_proj);

  float* conv_out = ws.floats(Workspace::kB, rows * conv_dim);
  kernels::causal_conv1d_silu(mixed, w.conv1d.data(), cache.conv.data(), conv_out, T, conv_dim, K);
  lap.to(ws.times.gdn_conv);
  float* q = ws.floats(Workspace::kC, rows * key_dim);
  float* k = ws.floats(Workspace::kD, rows * key_dim);
  float* v = ws.floats(Workspace::kE, rows * value_dim);
  copy_columns(conv_out, conv_dim, 0, q, T, key_dim);
  copy_columns(conv_out, conv_dim, key_dim, k, T, key_dim);
  copy_columns(conv_out, conv_dim, 2 * key_dim, v, T, value_dim);
  kernels::l2_normalize_rows(q, T * Hk, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
  kernels::l2_normalize_rows(k, T * Hk, dk, 1e-6f, 1.0f);
  float* beta = gates + rows * 2 * Hv;
  float* g = beta + rows * Hv;
  kernels::gdn_gates(gates, gates + Hv, 2 * Hv, w.A_log.data(), w.dt_bias.data(), beta, g, T, Hv);
  lap.to(ws.times.gdn_prep);

  float* core = ws.floats(Workspace::kH, rows * value_dim);
  const kernels::DeltaRuleDims dims{T, Hk, Hv, dk, dv};
  if (cache.capture_transition) {
    const size_t tsize = static_cast<size_t>(Hv) * dk * dk;
    float* block_t = ws.floats(Workspace::kI, tsize);
    kernels::gated_delta_rule_chunked(dims, q, k, v, g, beta, cache.state.data(), core, block_t);
    if (cache.transition.empty()) {
      cache.transition = Tensor({Hv, dk, dk});
      std::memcpy(cache.transition.data(), block_t, tsize * sizeof(float));
    } else {  // transition ← T_block · transition, head by head
      float* before = ws.floats(Workspace::kJ, tsize);
      std::memcpy(before, cache.transition.data(), tsize * sizeof(float));
      for (int h = 0; h < Hv; ++h) {
        const size_t off = static_cast<size_t>(h) * dk * dk;
        kernels::gemm(false, false, dk, dk, dk, 1.0f, block_t + off, dk, before + off, dk, 0.0f,
                      cache.transition.data() + off, dk);
      }
    }
  } else if (T == 1) {  // one decode step: the recurrence is the cheaper form
    kernels::gated_delta_rule_recurrent(dims, q, k, v, g, beta, cache.state.data(), core);
  } else {
    kernels::gated_delta_rule_chunked(dims, q, k, v, g, beta, cache.state.data(), core);
  }
  lap.to(ws.times.gdn_rule);

  float* normed = mixed;  // the projections are consumed
  kernels::gated_rms_norm(core, z, w.norm.data(), normed, T * Hv, dv, eps);
  kernels::linear(normed, w.out_proj.data(), out, T, hidden, value_dim, /*accumulate=*/true);
  lap.to(ws.times.gdn_out);
}

void attention_layer(const ModelConfig& cfg, const AttentionWeights& w, const float* x, float* out,
                     int T, int64_t pos0, LayerCache& cache, Workspace& ws) {
  const int hidden = cfg.hidden_size;
  const int H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const size_t rows = static_cast<size_t>(T);
  require(cache.kv_tokens() == pos0, "attention cache holds " + std::to_string(cache.kv_tokens()) +
                                         " tokens but the block starts at position " +
                                         std::to_string(pos0));
  Lap lap;

  float* qg = ws.floats(Workspace::kA, rows * H * 2 * hd);  // per head [query | gate]
  float* q = ws.floats(Workspace::kB, rows * H * hd);
  float* k = ws.floats(Workspace::kC, rows * Hkv * hd);
  float* v = ws.floats(Workspace::kD, rows * Hkv * hd);
  kernels::linear(x, w.q_proj.data(), qg, T, H * 2 * hd, hidden);
  kernels::linear(x, w.k_proj.data(), k, T, Hkv * hd, hidden);
  kernels::linear(x, w.v_proj.data(), v, T, Hkv * hd, hidden);
  for (size_t r = 0; r < rows * H; ++r)
    std::memcpy(q + r * hd, qg + r * 2 * hd, sizeof(float) * static_cast<size_t>(hd));
  kernels::rms_norm_zero_centred(q, w.q_norm.data(), q, T * H, hd, eps);
  kernels::rms_norm_zero_centred(k, w.k_norm.data(), k, T * Hkv, hd, eps);
  const int rot = cfg.rotary_dim();
  const float theta = static_cast<float>(cfg.rope_theta);
  kernels::rope_apply({T, H, hd, rot, theta}, q, pos0);
  kernels::rope_apply({T, Hkv, hd, rot, theta}, k, pos0);
  cache.append_kv(k, v, T);
  lap.to(ws.times.attn_proj);

  const kernels::AttentionDims dims{T,  static_cast<int>(cache.kv_tokens()),     H, Hkv,
                                    hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  float* attn = ws.floats(Workspace::kE, rows * H * hd);
  float* work = ws.floats(Workspace::kF, kernels::attention_workspace_floats(dims));
  kernels::attention_causal(dims, q, cache.k.data(), cache.v.data(), attn, work);
  lap.to(ws.times.attn_core);

  kernels::sigmoid_gate(attn, qg + hd, T * H, hd, 2 * hd);
  kernels::linear(attn, w.o_proj.data(), out, T, hidden, H * hd, /*accumulate=*/true);
  lap.to(ws.times.attn_out);
}

void mlp_layer(const MlpWeights& w, const float* x, float* out, int T, int hidden, Workspace& ws) {
  Lap lap;
  swiglu_mlp(w, x, out, T, hidden, /*accumulate=*/true, ws);
  lap.to(ws.times.mlp);
}

void moe_layer(const ModelConfig& cfg, const MoeWeights& w, const float* x, float* out, int T,
               Workspace& ws) {
  const int hidden = cfg.hidden_size;
  const int E = cfg.num_experts, top_k = cfg.num_experts_per_tok;
  const size_t rows = static_cast<size_t>(T);
  Lap lap;

  float* logits = ws.floats(Workspace::kA, rows * E);
  float* weights = ws.floats(Workspace::kB, rows * top_k);
  const size_t pairs = rows * top_k;
  int* chosen = ws.ints(2 * pairs + 2 * static_cast<size_t>(E) + 1);  // [T, k] experts
  int* start = chosen + pairs;  // [E+1] first pair of each expert's list
  int* fill = start + E + 1;    // [E] next free place per expert while sorting
  int* pair_ids = fill + E;     // pairs (t·k + j), grouped by expert, tokens ascending
  kernels::linear(x, w.router.data(), logits, T, E, hidden);
  kernels::moe_route(logits, T, E, top_k, cfg.norm_topk_prob, chosen, weights);

  std::fill(start, start + E + 1, 0);
  for (size_t i = 0; i < pairs; ++i) ++start[chosen[i] + 1];
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  std::copy(start, start + E, fill);
  for (size_t i = 0; i < pairs; ++i) pair_ids[fill[chosen[i]]++] = static_cast<int>(i);

  float* xe = ws.floats(Workspace::kC, rows * hidden);
  float* ye = ws.floats(Workspace::kD, rows * hidden);
  for (int e = 0; e < E; ++e) {
    const int n = start[e + 1] - start[e];
    if (n == 0) continue;
    const int* list = pair_ids + start[e];
    for (int r = 0; r < n; ++r)
      std::memcpy(xe + static_cast<size_t>(r) * hidden,
                  x + static_cast<size_t>(list[r] / top_k) * hidden, sizeof(float) * hidden);
    swiglu_mlp(w.experts[static_cast<size_t>(e)], xe, ye, n, hidden, /*accumulate=*/false, ws);
    for (int r = 0; r < n; ++r) {
      const float wt = weights[list[r]];
      float* o = out + static_cast<size_t>(list[r] / top_k) * hidden;
      const float* y = ye + static_cast<size_t>(r) * hidden;
      for (int c = 0; c < hidden; ++c) o[c] += wt * y[c];
    }
  }
  lap.to(ws.times.moe_experts);

  float* shared = ws.floats(Workspace::kC, rows * hidden);
  float* gate_logit = ws.floats(Workspace::kE, rows);
  swiglu_mlp(w.shared_expert, x, shared, T, hidden, /*accumulate=*/false, ws);
  kernels::linear(x, w.shared_expert_gate.data(), gate_logit, T, 1, hidden);
  kernels::add_sigmoid_scaled(out, shared, gate_logit, T, hidden);
  lap.to(ws.times.moe_shared);
}

}  // namespace hypic::model
