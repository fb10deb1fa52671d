// MiniMax lightning attention (see layers_lightning.hpp). Every op runs on the backend given.
#include "model/layers_lightning.hpp"

#include <chrono>
#include <cmath>
#include <string>

namespace hypic::model {
namespace {
constexpr int kChunk = 64;  // tokens per chunk of the family kernel (as the delta rule's)

}  // namespace

std::vector<float> lightning_slopes(const ModelConfig& cfg, int layer) {
  const int H = cfg.num_attention_heads;
  const double base = 1.0 / std::pow(2.0, 8.0 / H);
  const double factor = 1.0 - layer / (cfg.num_hidden_layers - 1 + 1e-5) + 1e-5;
  std::vector<float> s(static_cast<size_t>(H));
  for (int h = 0; h < H; ++h)  // transformers: base ** (h + 1) in f32, then × factor in f32
    s[static_cast<size_t>(h)] =
        static_cast<float>(static_cast<float>(std::pow(base, h + 1)) * factor);
  return s;
}

void scalar_decay_block(const kernels::Backend& be, const kernels::FamilySpec& spec,
                        const kernels::FamilyDims& dims, const kernels::FamilyInputs& in,
                        LayerCache& cache, float* out, float* block_t, Workspace& ws) {
  const int H = dims.Hv;
  if (cache.capture_transition) {
    be.family_chunked(spec, dims, in, f32(cache.state), out, block_t, kChunk);
    if (cache.transition.empty()) {
      cache.transition =
          be.device() == Device::Host ? Tensor({H}) : Tensor({H}, DType::F32, be.device(), &be);
      be.copy_within(f32(cache.transition), block_t, H * sizeof(float));
    } else {  // transition ← T_block · transition: one 1×1 product per head
      float* before = ws.floats(Workspace::kJ, H);
      be.copy_within(before, f32(cache.transition), H * sizeof(float));
      be.gemm_strided_batched(false, false, 1, 1, 1, 1.0f, block_t, 1, 1, before, 1, 1, 0.0f,
                              f32(cache.transition), 1, 1, H);
    }
  } else if (dims.T == 1) {
    be.family_recurrent_f32(spec, dims, in, f32(cache.state), out);
  } else {
    be.family_chunked(spec, dims, in, f32(cache.state), out, nullptr, kChunk);
  }
}

void lightning_layer(const kernels::Backend& be, const ModelConfig& cfg, int layer,
                     const LightningWeights& w, const float* x, float* out, const Span* spans,
                     int n_spans, LayerCache& cache, Workspace& ws, const AfterSpan* after,
                     int first_out) {
  const int hidden = cfg.hidden_size;
  const int H = cfg.num_attention_heads, hd = cfg.head_dim;
  const int width = H * hd;
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  // q, k, v = silu(qkv): silu(a) = a · sigmoid(a), the gate read from the projection itself.
  float* qkv = ws.floats(Workspace::kA, rows * 3 * width);
  float* q = ws.floats(Workspace::kB, rows * width);
  float* k = ws.floats(Workspace::kC, rows * width);
  float* v = ws.floats(Workspace::kD, rows * width);
  float* core = ws.floats(Workspace::kE, rows * width);
  float* gate = ws.floats(Workspace::kF, rows * width);
  float* g = ws.floats(Workspace::kG, rows * H);
  be.linear(x, w.qkv_proj, qkv, T, 3 * width, hidden, false);
  be.linear(x, w.output_gate, gate, T, width, hidden, false);
  lap.to(ws.times.gdn_proj);
  float* parts[3] = {q, k, v};
  for (int p = 0; p < 3; ++p) {
    be.copy_strided(qkv, 3 * hd, p * hd, parts[p], T * H, hd);
    be.sigmoid_gate(parts[p], qkv + p * hd, T * H, hd, 3 * hd);
  }
  // The log decay −slope_h of every token, built on the host and handed to the kernel.
  const std::vector<float> slopes = lightning_slopes(cfg, layer);
  std::vector<float> host_g(rows * H);
  for (size_t t = 0; t < rows; ++t)
    for (int h = 0; h < H; ++h) host_g[t * H + h] = -slopes[static_cast<size_t>(h)];
  be.copy_from_host(g, host_g.data(), host_g.size() * sizeof(float));
  lap.to(ws.times.gdn_prep);

  const kernels::FamilySpec spec = kernels::member_spec(kernels::Member::Lightning);
  float* block_t = cache.capture_transition ? ws.floats(Workspace::kI, H) : nullptr;
  for (int i = 0; i < n_spans; ++i) {
    const Span& s = spans[i];
    const int n = s.rows();
    const size_t r0 = static_cast<size_t>(s.begin);
    if (n > 0) {
      const kernels::FamilyDims dims{n, H, H, hd, hd};
      const kernels::FamilyInputs in{q + r0 * width, k + r0 * width, v + r0 * width, g + r0 * H,
                                     nullptr};
      float* core_s = core + r0 * width;
      scalar_decay_block(be, spec, dims, in, cache, core_s, block_t, ws);
      lap.to(ws.times.gdn_rule);
    }
    if (after != nullptr) (*after)(i, cache);
    lap.to(ws.times.splice);
  }

  // transformers' MiniMaxRMSNorm over all heads keeps its default eps of 1e-6.
  const size_t f0 = static_cast<size_t>(first_out) * width;
  be.rms_norm(core + f0, f32(w.norm), core + f0, T - first_out, width, 1e-6f);
  be.sigmoid_gate(core + f0, gate + f0, T - first_out, width, width);
  be.linear_from(first_out, core, w.out_proj, out, T, hidden, width, /*accumulate=*/true);
  lap.to(ws.times.gdn_out);
}

}  // namespace hypic::model
