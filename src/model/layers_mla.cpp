// MLA layer of kimi_linear (see layers_mla.hpp). Every op runs on the backend it is given.
#include "model/layers_mla.hpp"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "model/layers.hpp"

namespace hypic::model {

void mla_layer(const kernels::Backend& be, const ModelConfig& cfg, const MlaWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const AfterSpan* after, int first_out) {
  const int hidden = cfg.hidden_size, H = cfg.num_attention_heads;
  const int r = cfg.kv_lora_rank, rope = cfg.qk_rope_head_dim, nope = cfg.qk_nope_head_dim;
  const int vd = cfg.v_head_dim, R = r + rope, dq = nope + rope, ukv = nope + vd;
  const float eps = static_cast<float>(kMlaLatentNormEps);
  const int T = spans[n_spans - 1].end;
  const size_t rows = static_cast<size_t>(T);
  Lap lap(be);

  const float* one = unit_factor(be, ws, Workspace::kJ);

  // Queries: [q_nope | q_rope] per head, then absorbed into the latent space.
  float* q = ws.floats(Workspace::kA, rows * H * dq);
  if (cfg.q_lora_rank > 0) {
    float* qa = ws.floats(Workspace::kH, rows * cfg.q_lora_rank);
    be.linear(x, w.q_a_proj, qa, T, cfg.q_lora_rank, hidden, false);
    be.rms_norm(qa, f32(w.q_a_norm), qa, T, cfg.q_lora_rank, eps);
    be.linear(qa, w.q_b_proj, q, T, H * dq, cfg.q_lora_rank, false);
  } else {
    be.linear(x, w.q_proj, q, T, H * dq, hidden, false);
  }
  float* ql = ws.floats(Workspace::kB, rows * H * R);  // [T, H, r + rope]
  const float* wkv = f32(w.kv_b_proj);
  const int64_t head_block = static_cast<int64_t>(ukv) * r;  // kv_b_proj floats per head
  // ql_h[:, :r] = q_nope_h · W_uk_h (W_uk_h: the head's first nope rows of kv_b_proj, [nope, r])
  be.gemm_strided_batched(false, false, T, r, nope, 1.0f, q, H * dq, dq, wkv, r, head_block, 0.0f,
                          ql, H * R, R, H);
  place_rows(be, one, q + nope, dq, ql + r, R, T * H, rope);

  // Latent rows [rmsnorm(c) | k_rope].
  float* kv = ws.floats(Workspace::kC, rows * R);
  float* c = ws.floats(Workspace::kD, rows * r);
  be.linear(x, w.kv_a_proj, kv, T, R, hidden, false);
  be.copy_strided(kv, R, 0, c, T, r);
  be.rms_norm(c, f32(w.kv_a_norm), c, T, r, eps);
  place_rows(be, one, c, r, kv, R, T, r);
  lap.to(ws.times.attn_proj);

  const std::vector<int> positions =
      cache_spans(spans, n_spans, cache, after, lap, ws.times, [&](const Span& s) {
        cache.append_kv(kv + static_cast<size_t>(s.begin) * R, nullptr, s.rows(), &be);
      });
  // Multi-query attention over the latent rows; the rows are keys and (first r columns) values.
  kernels::AttentionDims dims{T, static_cast<int>(cache.kv_tokens()),     H, 1,
                              R, 1.0f / std::sqrt(static_cast<float>(dq))};
  dims.first_query = first_out;
  set_query_positions(be, positions, dims, ws);
  float* lat = ws.floats(Workspace::kE, rows * H * R);
  float* work = ws.floats(Workspace::kF, be.attention_workspace_floats(dims));
  be.attention_causal(dims, ql, f32(cache.k), f32(cache.k), lat, work);
  lap.to(ws.times.attn_core);

  // o_h = lat_h[:, :r] · W_uv_hᵀ (W_uv_h: the head's last v rows of kv_b_proj, [v, r]), over
  // every row (the rows before first_out carry whatever lat holds; rows do not mix).
  float* o = ws.floats(Workspace::kG, rows * H * vd);
  be.gemm_strided_batched(false, true, T, vd, r, 1.0f, lat, H * R, R, wkv + nope * r, r, head_block,
                          0.0f, o, H * vd, vd, H);
  be.linear_from(first_out, o, w.o_proj, out, T, hidden, H * vd, /*accumulate=*/true);
  lap.to(ws.times.attn_out);
}

}  // namespace hypic::model
