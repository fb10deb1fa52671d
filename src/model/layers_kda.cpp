// KDA layer of kimi_linear (see layers_kda.hpp). Every op runs on the backend it is given.
#include "model/layers_kda.hpp"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "model/layers.hpp"

namespace hypic::model {
namespace {
constexpr int kChunk = 64;  // tokens per chunk of the delta rule (as the Gated DeltaNet layer)

}  // namespace

void kda_layer(const kernels::Backend& be, const ModelConfig& cfg, const KdaWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const AfterSpan* after, int first_out) {
  const int hidden = cfg.hidden_size;
  const int H = cfg.linear_num_value_heads, d = cfg.linear_key_head_dim;
  const int P = H * d, conv_dim = 3 * P, K = cfg.linear_conv_kernel_dim;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  // Projections: the conv channels q|k|v, the two low-rank gates, β's logits.
  float* mixed = ws.floats(Workspace::kA, rows * conv_dim);
  float* low = ws.floats(Workspace::kB, rows * 2 * d);   // f_a(x) | g_a(x) (two products)
  float* f = ws.floats(Workspace::kC, rows * P);         // f_b(f_a(x)), then the gate g
  float* gate = ws.floats(Workspace::kD, rows * P);      // g_b(g_a(x))
  float* blog = ws.floats(Workspace::kE, rows * 2 * H);  // b logits | β
  be.linear(x, w.qkv, mixed, T, conv_dim, hidden, false);
  be.linear(x, w.f_a, low, T, d, hidden, false);
  be.linear(x, w.g_a, low + rows * d, T, d, hidden, false);
  be.linear(low, w.f_b, f, T, P, d, false);
  be.linear(low + rows * d, w.g_b, gate, T, P, d, false);
  be.linear(x, w.b_proj, blog, T, H, hidden, false);
  lap.to(ws.times.gdn_proj);
  // g per channel: the Gated DeltaNet gate op with one "head" per channel (A_log is stored
  // repeated per channel); its β output is scratch here. β per head from the b logits.
  float* g = ws.floats(Workspace::kF, rows * P);
  float* scratch = ws.floats(Workspace::kG, rows * P);
  be.gdn_gates(f, f, P, f32(w.A_log), f32(w.dt_bias), scratch, g, T, P);
  float* beta = blog + rows * H;
  be.gdn_gates(blog, blog, H, f32(w.A_log), f32(w.dt_bias), beta, scratch, T, H);
  lap.to(ws.times.gdn_prep);

  float* conv_out = ws.floats(Workspace::kH, rows * conv_dim);
  float* q = f;  // f is consumed by the gate op: q, k, v take its place and the scratch's
  float* k = scratch;
  float* v = ws.floats(Workspace::kI, rows * P);
  float* core = ws.floats(Workspace::kB, rows * P);  // the low-rank inputs are consumed
  const size_t tsize = static_cast<size_t>(H) * d * d;
  float* block_t = cache.capture_transition ? ws.floats(Workspace::kJ, 2 * tsize) : nullptr;
  const kernels::FamilySpec spec = kernels::member_spec(kernels::Member::KDA);
  const ConvQkvDims qkv{conv_dim, P, P, H, d, K};
  for (int i = 0; i < n_spans; ++i) {
    const Span& s = spans[i];
    const int n = s.rows();
    const size_t r0 = static_cast<size_t>(s.begin);
    if (n > 0) {
      float* qs = q + r0 * P;
      float* ks = k + r0 * P;
      float* vs = v + r0 * P;
      conv_span_qkv(be, qkv, w.conv1d, cache, mixed + r0 * conv_dim, conv_out + r0 * conv_dim, n,
                    qs, ks, vs, lap, ws.times);

      const kernels::FamilyDims dims{n, H, H, d, d};
      const kernels::FamilyInputs in{qs, ks, vs, g + r0 * P, beta + r0 * H};
      float* core_s = core + r0 * P;
      if (cache.capture_transition && cache.capture_lowrank) {
        // The WY form straight from the block's one chunk (exact, no dense T built).
        HYPIC_REQUIRE(cache.transition.empty() && n <= kChunk,
                      "a low-rank transition is captured over one block of at most " +
                          std::to_string(kChunk) + " tokens");
        auto alloc = [&](std::vector<int64_t> shape) {
          return be.device() == Device::Host
                     ? Tensor(std::move(shape))
                     : Tensor(std::move(shape), DType::F32, be.device(), &be);
        };
        cache.transition = alloc({H, d});
        cache.transition_x = alloc({H, n, d});
        cache.transition_y = alloc({H, n, d});
        be.family_chunked_lowrank(spec, dims, in, f32(cache.state), core_s, f32(cache.transition),
                                  f32(cache.transition_x), f32(cache.transition_y));
      } else if (cache.capture_transition) {
        be.family_chunked(spec, dims, in, f32(cache.state), core_s, block_t, kChunk);
        accumulate_transition(be, cache, block_t, block_t + tsize, H, d);
      } else if (n == 1) {  // one decode step: the recurrence is the cheaper form
        be.family_recurrent_f32(spec, dims, in, f32(cache.state), core_s);
      } else {
        be.family_chunked(spec, dims, in, f32(cache.state), core_s, nullptr, kChunk);
      }
      lap.to(ws.times.gdn_rule);
    }
    if (after != nullptr) (*after)(i, cache);
    lap.to(ws.times.splice);
  }

  // o_norm: plain RMSNorm per head, then the sigmoid output gate, then o_proj.
  float* normed = mixed;  // the projections are consumed
  const size_t f0 = static_cast<size_t>(first_out) * P;
  const int needed = (T - first_out) * H;
  be.rms_norm(core + f0, f32(w.o_norm), normed + f0, needed, d, eps);
  be.sigmoid_gate(normed + f0, gate + f0, needed, d, d);
  be.linear_from(first_out, normed, w.o_proj, out, T, hidden, P, /*accumulate=*/true);
  lap.to(ws.times.gdn_out);
}

}  // namespace hypic::model
