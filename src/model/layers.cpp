// Layer kinds of the forward pass. Every op goes through the backend the layer is given (one
// call per op and block: large products with all T tokens at once, the rest over the block).
#include "model/layers.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "hypic/kernels/attention_checks.hpp"

namespace hypic::model {
namespace {
constexpr int kDeltaRuleChunk = 64;  // tokens per chunk of the delta rule (Model::max_block)

// y = down(silu(gate(x)) · up(x)) into y (accumulating when asked) for the rows from `first`
// on (earlier ones may get any values); uses slots kG, kH.
void swiglu_mlp(const kernels::Backend& be, const MlpWeights& w, const float* x, float* y, int T,
                int hidden, bool accumulate, Workspace& ws, int first = 0) {
  const int width = static_cast<int>(w.down.dim(1));
  const size_t r0 = static_cast<size_t>(first);
  float* gate_up = ws.floats(Workspace::kG, static_cast<size_t>(T) * 2 * width);
  float* act = ws.floats(Workspace::kH, static_cast<size_t>(T) * width);
  be.linear_from(first, x, w.gate_up, gate_up, T, 2 * width, hidden, false);
  be.swiglu(gate_up + r0 * 2 * width, act + r0 * width, T - first, width);
  be.linear_from(first, act, w.down, y, T, hidden, width, accumulate);
}
}  // namespace

double ForwardTimes::total() const {
  return embed_norms + gdn_proj + gdn_conv + gdn_prep + gdn_rule + gdn_out + attn_proj + attn_core +
         attn_out + mlp + moe_experts + moe_shared + lm_head + splice;
}

float* Workspace::floats(Slot slot, size_t n) {
  if (device_ != nullptr)
    return static_cast<float*>(device_buffer(device_floats_[slot], DType::F32, n));
  std::vector<float>& b = buffers_[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

int* Workspace::ints(size_t n) {
  if (device_ != nullptr) return static_cast<int*>(device_buffer(device_ints_, DType::I32, n));
  if (ints_.size() < n) ints_.resize(n);
  return ints_.data();
}

int32_t* Workspace::token_ids(size_t n) {
  if (device_ != nullptr) return static_cast<int32_t*>(device_buffer(device_ids_, DType::I32, n));
  if (ids_.size() < n) ids_.resize(n);
  return ids_.data();
}

void* Workspace::device_buffer(Tensor& t, DType dtype, size_t n) {
  if (t.rank() == 0 || static_cast<size_t>(t.numel()) < n) {
    Tensor grown({static_cast<int64_t>(std::max<size_t>(n, 1))}, dtype, device_->device(), device_);
    if (t.rank() > 0 && t.bytes() > 0) device_->copy_within(grown.raw(), t.raw(), t.bytes());
    t = std::move(grown);
  }
  return t.raw();
}

void conv_span_qkv(const kernels::Backend& be, const ConvQkvDims& d, const Tensor& conv_weight,
                   LayerCache& cache, const float* mixed, float* conv_out, int n, float* q,
                   float* k, float* v, Lap& lap, ForwardTimes& times) {
  be.causal_conv1d_silu(mixed, f32(conv_weight), f32(cache.conv), conv_out, n, d.conv_dim,
                        d.kernel);
  lap.to(times.gdn_conv);
  be.copy_strided(conv_out, d.conv_dim, 0, q, n, d.key_dim);
  be.copy_strided(conv_out, d.conv_dim, d.key_dim, k, n, d.key_dim);
  be.copy_strided(conv_out, d.conv_dim, 2 * d.key_dim, v, n, d.value_dim);
  be.l2_normalize_rows(q, n * d.key_heads, d.dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(d.dk)));
  be.l2_normalize_rows(k, n * d.key_heads, d.dk, 1e-6f, 1.0f);
  lap.to(times.gdn_prep);
}

void accumulate_transition(const kernels::Backend& be, LayerCache& cache, const float* block_t,
                           float* before, int heads, int dk) {
  const size_t tsize = static_cast<size_t>(heads) * dk * dk;
  if (cache.transition.empty()) {
    cache.transition = be.device() == Device::Host
                           ? Tensor({heads, dk, dk})
                           : Tensor({heads, dk, dk}, DType::F32, be.device(), &be);
    be.copy_within(f32(cache.transition), block_t, tsize * sizeof(float));
    return;
  }
  be.copy_within(before, f32(cache.transition), tsize * sizeof(float));
  const int64_t dd = static_cast<int64_t>(dk) * dk;
  be.gemm_strided_batched(false, false, dk, dk, dk, 1.0f, block_t, dk, dd, before, dk, dd, 0.0f,
                          f32(cache.transition), dk, dd, heads);
}

std::vector<int> cache_spans(const Span* spans, int n_spans, LayerCache& cache,
                             const AfterSpan* after, Lap& lap, ForwardTimes& times,
                             const std::function<void(const Span&)>& append) {
  const size_t rows = static_cast<size_t>(spans[n_spans - 1].end);
  // Explicit query positions whenever something may be spliced after a span: a lone window
  // followed by its segment's cached rows must not see them (n_kv − T + t would be wrong).
  std::vector<int> positions(n_spans > 1 || after != nullptr ? rows : 0);
  for (int i = 0; i < n_spans; ++i) {
    const Span& s = spans[i];
    if (s.rows() > 0) {
      HYPIC_REQUIRE(cache.kv_tokens() == s.pos0,
                    "attention cache holds " + std::to_string(cache.kv_tokens()) +
                        " tokens but the block starts at position " + std::to_string(s.pos0));
      append(s);
      if (!positions.empty())
        for (int t = 0; t < s.rows(); ++t)
          positions[static_cast<size_t>(s.begin + t)] = static_cast<int>(s.pos0 + t);
    }
    lap.to(times.attn_proj);
    if (after != nullptr) (*after)(i, cache);
    lap.to(times.splice);
  }
  return positions;
}

const float* unit_factor(const kernels::Backend& be, Workspace& ws, Workspace::Slot slot) {
  float* one = ws.floats(slot, 1);
  const float unit = 1.0f;
  if (be.device() == Device::Host)
    *one = unit;
  else
    be.copy_from_host(one, &unit, sizeof(float));
  return one;
}

void place_rows(const kernels::Backend& be, const float* one, const float* src, int src_ld,
                float* dst, int dst_ld, int rows, int cols) {
  if (rows <= 0 || cols <= 0) return;
  be.gemm_strided_batched(false, false, 1, cols, 1, 1.0f, one, 1, 0, src, cols, src_ld, 0.0f, dst,
                          cols, dst_ld, rows);
}

void set_query_positions(const kernels::Backend& be, const std::vector<int>& positions,
                         kernels::AttentionDims& dims, Workspace& ws) {
  if (positions.empty()) return;
  if (be.device() == Device::Host) {
    dims.positions = positions.data();
    return;
  }
  // Checked here, where they are host memory, exactly as the host kernel checks them.
  kernels::check_query_positions(positions.data(), static_cast<int>(positions.size()), dims.n_kv);
  int* dev = ws.ints(positions.size());
  be.copy_from_host(dev, positions.data(), positions.size() * sizeof(int));
  dims.positions = dev;
  dims.positions_checked = true;  // the device kernel need not copy them back to check them
}

void rope_cache_attend(const kernels::Backend& be, const ModelConfig& cfg, float* q, float* k,
                       const float* v, float* attn, const Span* spans, int n_spans,
                       LayerCache& cache, Workspace& ws, const AfterSpan* after, Lap& lap,
                       int first_out) {
  const int H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int T = spans[n_spans - 1].end;
  const int rot = cfg.rotary_dim();
  const float theta = static_cast<float>(cfg.rope_theta);
  // Each span's K and V join the cache at its place, then the hook appends what follows it.
  const std::vector<int> positions =
      cache_spans(spans, n_spans, cache, after, lap, ws.times, [&](const Span& s) {
        const size_t r0 = static_cast<size_t>(s.begin);
        float* ks = k + r0 * Hkv * hd;
        be.rope_apply({s.rows(), H, hd, rot, theta}, q + r0 * H * hd, s.pos0);
        be.rope_apply({s.rows(), Hkv, hd, rot, theta}, ks, s.pos0);
        cache.append_kv(ks, v + r0 * Hkv * hd, s.rows(), &be);
      });
  // Every span's queries in one call: each sees the keys up to its own position (what came
  // before it, spliced parts included, and its own span causally), none after.
  kernels::AttentionDims dims{T,  static_cast<int>(cache.kv_tokens()),     H, Hkv,
                              hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  dims.first_query = first_out;
  set_query_positions(be, positions, dims, ws);
  float* work = ws.floats(Workspace::kF, be.attention_workspace_floats(dims));
  be.attention_causal(dims, q, f32(cache.k), f32(cache.v), attn, work);
  lap.to(ws.times.attn_core);
}

void gdn_layer(const kernels::Backend& be, const ModelConfig& cfg, const GdnWeights& w,
               const float* x, float* out, int T, LayerCache& cache, Workspace& ws) {
  const Span whole{0, T, 0};
  gdn_layer(be, cfg, w, x, out, &whole, 1, cache, ws, nullptr);
}

void gdn_layer(const kernels::Backend& be, const ModelConfig& cfg, const GdnWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const AfterSpan* after, int first_out) {
  const int hidden = cfg.hidden_size;
  const int Hk = cfg.linear_num_key_heads, Hv = cfg.linear_num_value_heads;
  const int dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim;
  const int key_dim = Hk * dk, value_dim = Hv * dv, conv_dim = cfg.linear_conv_dim();
  const int K = cfg.linear_conv_kernel_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  // Projections: the conv channels (q|k|v), then z, then b|a, each one product.
  float* mixed = ws.floats(Workspace::kA, rows * conv_dim);
  float* z = ws.floats(Workspace::kF, rows * value_dim);
  float* gates = ws.floats(Workspace::kG, rows * 4 * Hv);  // b|a, then beta, then g
  be.linear(x, w.in_proj, mixed, T, conv_dim, hidden, false);
  be.linear(x, w.in_proj, z, T, value_dim, hidden, false, conv_dim);
  be.linear(x, w.in_proj, gates, T, 2 * Hv, hidden, false, conv_dim + value_dim);
  lap.to(ws.times.gdn_proj);
  float* beta = gates + rows * 2 * Hv;
  float* g = beta + rows * Hv;
  be.gdn_gates(gates, gates + Hv, 2 * Hv, f32(w.A_log), f32(w.dt_bias), beta, g, T, Hv);
  lap.to(ws.times.gdn_prep);

  float* conv_out = ws.floats(Workspace::kB, rows * conv_dim);
  float* q = ws.floats(Workspace::kC, rows * key_dim);
  float* k = ws.floats(Workspace::kD, rows * key_dim);
  float* v = ws.floats(Workspace::kE, rows * value_dim);
  float* core = ws.floats(Workspace::kH, rows * value_dim);
  const size_t tsize = static_cast<size_t>(Hv) * dk * dk;
  float* block_t = cache.capture_transition ? ws.floats(Workspace::kI, tsize) : nullptr;
  const kernels::FamilySpec spec = kernels::member_spec(kernels::Member::GatedDeltaNet);
  const ConvQkvDims qkv{conv_dim, key_dim, value_dim, Hk, dk, K};
  // Conv and delta rule continue the cache span by span: each span starts from the state
  // (and conv tail) that the previous span and the hook left.
  for (int i = 0; i < n_spans; ++i) {
    const Span& s = spans[i];
    const int n = s.rows();
    const size_t r0 = static_cast<size_t>(s.begin);
    if (n > 0) {
      float* qs = q + r0 * key_dim;
      float* ks = k + r0 * key_dim;
      float* vs = v + r0 * value_dim;
      conv_span_qkv(be, qkv, w.conv1d, cache, mixed + r0 * conv_dim, conv_out + r0 * conv_dim, n,
                    qs, ks, vs, lap, ws.times);

      const kernels::FamilyDims dims{n, Hk, Hv, dk, dv};
      const kernels::FamilyInputs in{qs, ks, vs, g + r0 * Hv, beta + r0 * Hv};
      float* core_s = core + r0 * value_dim;
      if (cache.capture_transition) {
        be.family_chunked(spec, dims, in, f32(cache.state), core_s, block_t, kDeltaRuleChunk);
        accumulate_transition(be, cache, block_t, ws.floats(Workspace::kJ, tsize), Hv, dk);
      } else if (n == 1) {  // one decode step: the recurrence is the cheaper form
        be.family_recurrent_f32(spec, dims, in, f32(cache.state), core_s);
      } else {
        be.family_chunked(spec, dims, in, f32(cache.state), core_s, nullptr, kDeltaRuleChunk);
      }
      lap.to(ws.times.gdn_rule);
    }
    if (after != nullptr) (*after)(i, cache);
    lap.to(ws.times.splice);
  }

  float* normed = mixed;  // the projections are consumed
  const size_t f0 = static_cast<size_t>(first_out) * value_dim;
  be.gated_rms_norm(core + f0, z + f0, f32(w.norm), normed + f0, (T - first_out) * Hv, dv, eps);
  be.linear_from(first_out, normed, w.out_proj, out, T, hidden, value_dim, /*accumulate=*/true);
  lap.to(ws.times.gdn_out);
}

void attention_layer(const kernels::Backend& be, const ModelConfig& cfg, const AttentionWeights& w,
                     const float* x, float* out, int T, int64_t pos0, LayerCache& cache,
                     Workspace& ws) {
  const Span whole{0, T, pos0};
  attention_layer(be, cfg, w, x, out, &whole, 1, cache, ws, nullptr);
}

void attention_layer(const kernels::Backend& be, const ModelConfig& cfg, const AttentionWeights& w,
                     const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
                     Workspace& ws, const AfterSpan* after, int first_out) {
  const int hidden = cfg.hidden_size;
  const int H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  const bool gated = cfg.attention_output_gate;
  float* qg = gated ? ws.floats(Workspace::kA, rows * H * 2 * hd) : nullptr;  // [query | gate]
  float* q = ws.floats(Workspace::kB, rows * H * hd);
  float* k = ws.floats(Workspace::kC, rows * Hkv * hd);
  float* v = ws.floats(Workspace::kD, rows * Hkv * hd);
  float* attn = ws.floats(Workspace::kE, rows * H * hd);
  if (gated) {
    be.linear(x, w.q_proj, qg, T, H * 2 * hd, hidden, false);
    be.copy_strided(qg, 2 * hd, 0, q, T * H, hd);
  } else {  // Mixtral-style (MiniMax): the projection is the query
    be.linear(x, w.q_proj, q, T, H * hd, hidden, false);
  }
  be.linear(x, w.k_proj, k, T, Hkv * hd, hidden, false);
  be.linear(x, w.v_proj, v, T, Hkv * hd, hidden, false);
  if (cfg.attention_qk_norm) {
    rms_norm(be, cfg, q, w.q_norm, q, T * H, hd);
    rms_norm(be, cfg, k, w.k_norm, k, T * Hkv, hd);
  }
  lap.to(ws.times.attn_proj);
  rope_cache_attend(be, cfg, q, k, v, attn, spans, n_spans, cache, ws, after, lap, first_out);

  const size_t f0 = static_cast<size_t>(first_out) * H;  // the first needed (row, head)
  if (gated)
    be.sigmoid_gate(attn + f0 * hd, qg + f0 * 2 * hd + hd, (T - first_out) * H, hd, 2 * hd);
  be.linear_from(first_out, attn, w.o_proj, out, T, hidden, H * hd, /*accumulate=*/true);
  lap.to(ws.times.attn_out);
}

void rms_norm(const kernels::Backend& be, const ModelConfig& cfg, const float* x, const Tensor& w,
              float* y, int rows, int cols) {
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  if (cfg.zero_centred_norm)
    be.rms_norm_zero_centred(x, f32(w), y, rows, cols, eps);
  else
    be.rms_norm(x, f32(w), y, rows, cols, eps);
}

void mlp_layer(const kernels::Backend& be, const MlpWeights& w, const float* x, float* out, int T,
               int hidden, Workspace& ws, int first_out) {
  Lap lap(be);
  swiglu_mlp(be, w, x, out, T, hidden, /*accumulate=*/true, ws, first_out);
  lap.to(ws.times.mlp);
}

void moe_layer(const kernels::Backend& be, const ModelConfig& cfg, const MoeWeights& w,
               const float* x, float* out, int T, Workspace& ws, int first_out) {
  const int hidden = cfg.hidden_size;
  const int E = cfg.num_experts, top_k = cfg.num_experts_per_tok;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  float* logits = ws.floats(Workspace::kA, rows * E);
  float* weights = ws.floats(Workspace::kB, rows * top_k);
  const size_t pairs = rows * top_k;
  int* chosen = ws.ints(3 * pairs + 2 * static_cast<size_t>(E) + 1);  // [T, k] experts
  int* start = chosen + pairs;           // [E+1] first pair of each expert's list
  int* fill = start + E + 1;             // [E] next free place per expert while sorting
  int* pair_ids = fill + E;              // pairs (t·k + j), grouped by expert, tokens ascending
  int* combine_work = pair_ids + pairs;  // [T·k] the row of each pair
  be.linear(x, w.router, logits, T, E, hidden, false);
  kernels::MoeRouteSpec route;
  route.experts = E;
  route.top_k = top_k;
  route.scoring = cfg.moe_scoring == "sigmoid" ? kernels::RouteScoring::Sigmoid
                                               : kernels::RouteScoring::Softmax;
  route.norm_topk = cfg.norm_topk_prob;
  route.n_group = cfg.moe_n_group;
  route.topk_group = cfg.moe_topk_group;
  route.scale = static_cast<float>(cfg.moe_routed_scaling_factor);
  be.moe_route(route, logits, w.router_bias.empty() ? nullptr : f32(w.router_bias), T, chosen,
               weights);

  be.moe_group(chosen, T, top_k, E, start, pair_ids, fill);
  // The list sizes decide the products' shapes, so they come to the host (E + 1 ints) when
  // the grouping ran on a device; the lists themselves stay there.
  std::vector<int> host_start;
  const int* starts = start;
  if (be.device() != Device::Host) {
    host_start.resize(static_cast<size_t>(E) + 1);
    be.copy_to_host(host_start.data(), start, host_start.size() * sizeof(int));
    starts = host_start.data();
  }

  // Every expert at once: the T·k rows gathered in expert order, one grouped product per
  // projection (groups = experts; the CUDA backend runs each as one grouped cuBLAS call), one
  // SwiGLU over all rows, and one combine that adds each token's k rows in expert order.
  const int pairs_n = static_cast<int>(pairs);
  const int width = static_cast<int>(w.experts.front().down.dim(1));
  float* xe = ws.floats(Workspace::kC, pairs * hidden);  // the gathered rows, then ye
  float* gate_up = ws.floats(Workspace::kG, pairs * 2 * static_cast<size_t>(width));
  float* act = ws.floats(Workspace::kH, pairs * static_cast<size_t>(width));
  std::vector<const Tensor*> gate_ups(static_cast<size_t>(E)), downs(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    gate_ups[static_cast<size_t>(e)] = &w.experts[static_cast<size_t>(e)].gate_up;
    downs[static_cast<size_t>(e)] = &w.experts[static_cast<size_t>(e)].down;
  }
  be.moe_gather(x, hidden, pair_ids, pairs_n, top_k, xe);
  if (first_out == 0 || be.device() != Device::Host) {  // a device's grouping runs there
    be.grouped_linear(xe, gate_ups.data(), starts, E, gate_up, 2 * width, hidden);
    be.swiglu(gate_up, act, pairs_n, width);
    be.grouped_linear(act, downs.data(), starts, E, xe, hidden, width);
  } else {
    // Only the tokens from first_out on go on. The routing and grouping above ran for every
    // token, so each group holds the rows it holds in the whole product (a row's numbers
    // depend on its group's size) and its needed pairs, tokens ascending, are its last rows;
    // a group without any is skipped. The rows of the other pairs hold any values.
    std::vector<int> firsts(static_cast<size_t>(E));
    const int first_pair = first_out * top_k;  // pair ids are t·k + j
    for (int e = 0; e < E; ++e)
      firsts[static_cast<size_t>(e)] = static_cast<int>(
          std::lower_bound(pair_ids + starts[e], pair_ids + starts[e + 1], first_pair) - pair_ids);
    be.grouped_linear_from(firsts.data(), xe, gate_ups.data(), starts, E, gate_up, 2 * width,
                           hidden);
    be.swiglu(gate_up, act, pairs_n, width);
    be.grouped_linear_from(firsts.data(), act, downs.data(), starts, E, xe, hidden, width);
  }
  be.moe_combine(xe, hidden, pair_ids, T, top_k, weights, out, combine_work);
  lap.to(ws.times.moe_experts);

  if (cfg.shared_expert_intermediate_size == 0) return;  // no shared expert
  if (w.shared_expert_gate.empty()) {
    swiglu_mlp(be, w.shared_expert, x, out, T, hidden, /*accumulate=*/true, ws, first_out);
  } else {
    float* shared = ws.floats(Workspace::kC, rows * hidden);
    float* gate_logit = ws.floats(Workspace::kE, rows);
    swiglu_mlp(be, w.shared_expert, x, shared, T, hidden, /*accumulate=*/false, ws, first_out);
    be.linear_from(first_out, x, w.shared_expert_gate, gate_logit, T, 1, hidden, false);
    const size_t f0 = static_cast<size_t>(first_out);
    be.add_sigmoid_scaled(out + f0 * hidden, shared + f0 * hidden, gate_logit + f0, T - first_out,
                          hidden);
  }
  lap.to(ws.times.moe_shared);
}

}  // namespace hypic::model
