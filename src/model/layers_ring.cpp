// Ring-linear's attention kinds (layers_ring.hpp). Every op goes through the backend.
#include "model/layers_ring.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/cache.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"
#include "model/layers_lightning.hpp"
#include "model/weights.hpp"

namespace hypic::model {
namespace {
// ALiBi slopes of n heads: geometric from 2^(−8/p) for a power of two p; otherwise those of
// the largest power of two p below n, then every other slope of 2p.
std::vector<double> alibi_slopes(int n) {
  auto pow2 = [](int m) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(m) - 3.0)));
    std::vector<double> s(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) s[static_cast<size_t>(i)] = start * std::pow(start, i);
    return s;
  };
  const double lg = std::log2(n);
  if (lg == std::floor(lg)) return pow2(n);
  const int p = 1 << static_cast<int>(std::floor(lg));
  std::vector<double> s = pow2(p);
  const std::vector<double> twice = alibi_slopes(2 * p);
  for (int i = 0; static_cast<int>(s.size()) < n; i += 2)
    s.push_back(twice[static_cast<size_t>(i)]);
  return s;
}

// Host values into the backend's memory (a workspace slot), or as they are on the host.
const float* on_backend(const kernels::Backend& be, const std::vector<float>& v, float* slot) {
  if (be.device() == Device::Host) {
    std::memcpy(slot, v.data(), v.size() * sizeof(float));
  } else {
    be.copy_from_host(slot, v.data(), v.size() * sizeof(float));
  }
  return slot;
}

// K/V-free part shared by both kinds: the fused projection split into q [T, Hq·hd],
// k [T, Hkv·hd], v [T, Hkv·hd], q/k RMSNorm per head.
void project_qkv(const kernels::Backend& be, const ModelConfig& cfg, const RingAttentionWeights& w,
                 const float* x, int T, int Hq, int Hkv, float* qkv, float* q, float* k, float* v) {
  const int hd = cfg.head_dim;
  const int width = (Hq + 2 * Hkv) * hd;
  be.linear(x, w.qkv, qkv, T, width, cfg.hidden_size, false);
  be.copy_strided(qkv, width, 0, q, T, Hq * hd);
  be.copy_strided(qkv, width, Hq * hd, k, T, Hkv * hd);
  be.copy_strided(qkv, width, (Hq + Hkv) * hd, v, T, Hkv * hd);
  if (cfg.use_qk_norm) {
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    be.rms_norm(q, f32(w.q_norm), q, T * Hq, hd, eps);
    be.rms_norm(k, f32(w.k_norm), k, T * Hkv, hd, eps);
  }
}

}  // namespace

std::vector<float> ring_log_decay(const ModelConfig& cfg, int layer) {
  const std::vector<double> slopes = alibi_slopes(cfg.num_attention_heads);
  const double factor =
      1.0 - static_cast<double>(layer - 1) / static_cast<double>(cfg.num_hidden_layers - 1) + 1e-5;
  std::vector<float> g(slopes.size());
  for (size_t h = 0; h < slopes.size(); ++h) g[h] = static_cast<float>(-slopes[h] * factor);
  return g;
}

void ring_linear_layer(const kernels::Backend& be, const ModelConfig& cfg, int layer,
                       const RingAttentionWeights& w, const float* x, float* out, const Span* spans,
                       int n_spans, LayerCache& cache, Workspace& ws, const AfterSpan* after,
                       int first_out) {
  const int hidden = cfg.hidden_size, H = cfg.num_attention_heads, hd = cfg.head_dim;
  const int inner = H * hd;
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  float* qkv = ws.floats(Workspace::kA, rows * 3 * inner);
  float* q = ws.floats(Workspace::kB, rows * inner);
  float* k = ws.floats(Workspace::kC, rows * inner);
  float* v = ws.floats(Workspace::kD, rows * inner);
  project_qkv(be, cfg, w, x, T, H, H, qkv, q, k, v);
  float* gate = ws.floats(Workspace::kF, rows * inner);
  be.linear(x, w.g_proj, gate, T, inner, hidden, false);
  lap.to(ws.times.gdn_proj);

  // The decay is the same for every token: λ_h per row of [T, H].
  const std::vector<float> lambda = ring_log_decay(cfg, layer);
  std::vector<float> decays(rows * H);
  for (size_t t = 0; t < rows; ++t)
    std::memcpy(decays.data() + t * H, lambda.data(), sizeof(float) * H);
  const float* g = on_backend(be, decays, ws.floats(Workspace::kH, rows * H));
  const int rot = cfg.rotary_dim();
  const float theta = static_cast<float>(cfg.rope_theta);
  float* core = ws.floats(Workspace::kE, rows * inner);
  float* block_t = cache.capture_transition ? ws.floats(Workspace::kI, H) : nullptr;
  const kernels::FamilySpec spec{kernels::Decay::Scalar, false};
  lap.to(ws.times.gdn_prep);
  for (int i = 0; i < n_spans; ++i) {
    const Span& s = spans[i];
    const int n = s.rows();
    const size_t r0 = static_cast<size_t>(s.begin);
    if (n > 0) {
      float* qs = q + r0 * inner;
      float* ks = k + r0 * inner;
      be.rope_apply({n, H, hd, rot, theta}, qs, s.pos0);
      be.rope_apply({n, H, hd, rot, theta}, ks, s.pos0);
      lap.to(ws.times.gdn_prep);
      // q is left unscaled: o scales with q, and the group RMSNorm below, the only reader of
      // o, takes hd^-½ into its eps instead (norm(c·o; eps) = norm(o; eps/c²)).
      const kernels::FamilyDims dims{n, H, H, hd, hd};
      const kernels::FamilyInputs in{qs, ks, v + r0 * inner, g + r0 * H, nullptr};
      float* core_s = core + r0 * inner;
      scalar_decay_block(be, spec, dims, in, cache, core_s, block_t, ws);
      lap.to(ws.times.gdn_rule);
    }
    if (after != nullptr) (*after)(i, cache);
    lap.to(ws.times.splice);
  }

  // Group RMSNorm · sigmoid(gate), then dense. Each group's columns are gathered and
  // normalised with their slice of g_norm. Only the rows from first_out on are normed and
  // gated (the product takes the others as they are: its rows do not mix).
  const int groups = cfg.group_norm_size, cols = inner / groups;
  const float eps = static_cast<float>(cfg.rms_norm_eps) * static_cast<float>(hd);
  float* part = ws.floats(Workspace::kG, rows * cols);
  const size_t f0 = static_cast<size_t>(first_out);
  const int needed = T - first_out;
  float* pf = part + f0 * cols;
  if (w.dense.dtype() == DType::F32) {
    // f32 dense (the host; a device without tensor_core_products()): each group, gated, is
    // multiplied by its columns of dense into out, one f32 gemm per group.
    for (int gi = 0; gi < groups; ++gi) {
      be.copy_strided(core + f0 * inner, inner, gi * cols, pf, needed, cols);
      be.rms_norm(pf, f32(w.g_norm) + static_cast<size_t>(gi) * cols, pf, needed, cols, eps);
      be.sigmoid_gate(pf, gate + f0 * inner + static_cast<size_t>(gi) * cols, needed, cols, inner);
      be.gemm(false, true, T, hidden, cols, 1.0f, part, cols,
              f32(w.dense) + static_cast<size_t>(gi) * cols, inner, 1.0f, out, hidden);
    }
  } else {
    // bf16 dense (model::to_backend for a device with tensor_core_products(), as every matrix
    // the layers read through Backend::linear): each normalised group is written back into its
    // columns of core, all of them are gated at once, and one product by the whole of dense
    // (on tensor cores) adds them into out.
    const float* one = unit_factor(be, ws, Workspace::kJ);
    for (int gi = 0; gi < groups; ++gi) {
      float* block = core + f0 * inner + static_cast<size_t>(gi) * cols;
      be.copy_strided(core + f0 * inner, inner, gi * cols, pf, needed, cols);
      be.rms_norm(pf, f32(w.g_norm) + static_cast<size_t>(gi) * cols, pf, needed, cols, eps);
      place_rows(be, one, pf, cols, block, inner, needed, cols);
    }
    be.sigmoid_gate(core + f0 * inner, gate + f0 * inner, needed, inner, inner);
    be.linear_from(first_out, core, w.dense, out, T, hidden, inner, /*accumulate=*/true);
  }
  lap.to(ws.times.gdn_out);
}

void ring_attention_layer(const kernels::Backend& be, const ModelConfig& cfg,
                          const RingAttentionWeights& w, const float* x, float* out,
                          const Span* spans, int n_spans, LayerCache& cache, Workspace& ws,
                          const AfterSpan* after, int first_out) {
  const int hidden = cfg.hidden_size;
  const int H = cfg.num_attention_heads, Hkv = cfg.num_key_value_heads, hd = cfg.head_dim;
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  float* qkv = ws.floats(Workspace::kA, rows * (H + 2 * Hkv) * hd);
  float* q = ws.floats(Workspace::kB, rows * H * hd);
  float* k = ws.floats(Workspace::kC, rows * Hkv * hd);
  float* v = ws.floats(Workspace::kD, rows * Hkv * hd);
  float* attn = ws.floats(Workspace::kE, rows * H * hd);
  project_qkv(be, cfg, w, x, T, H, Hkv, qkv, q, k, v);
  lap.to(ws.times.attn_proj);
  rope_cache_attend(be, cfg, q, k, v, attn, spans, n_spans, cache, ws, after, lap, first_out);
  be.linear_from(first_out, attn, w.dense, out, T, hidden, H * hd, /*accumulate=*/true);
  lap.to(ws.times.attn_out);
}

}  // namespace hypic::model
