#include "bench/compose.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/linear_attention.hpp"
#include "hypic/kernels/norm.hpp"
#include "model/cache.hpp"
#include "model/layers.hpp"
#include "pic/linear_summary.hpp"

namespace hypic::bench {
namespace {

Tensor random_tensor(std::vector<int64_t> shape, float scale, std::mt19937& rng) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> n(0.0f, scale);
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = n(rng);
  return t;
}

void fill_zero(Tensor& t) {
  std::fill(t.data(), t.data() + t.numel(), 0.0f);
}

// Random weights for one Gated DeltaNet layer of `cfg`'s sizes.
model::GdnWeights random_gdn_weights(const model::ModelConfig& cfg, std::mt19937& rng) {
  const int hidden = cfg.hidden_size, hv = cfg.linear_num_value_heads;
  const int conv_dim = cfg.linear_conv_dim(), vdim = cfg.linear_value_dim();
  model::GdnWeights w;
  w.in_proj =
      random_tensor({conv_dim + vdim + 2 * hv, hidden}, 1.0f / std::sqrt(float(hidden)), rng);
  w.conv1d = random_tensor({conv_dim, cfg.linear_conv_kernel_dim}, 0.5f, rng);
  w.dt_bias = Tensor({hv}, 1.0f);
  w.A_log = random_tensor({hv}, 0.5f, rng);
  w.norm = Tensor({cfg.linear_value_head_dim}, 1.0f);
  w.out_proj = random_tensor({hidden, vdim}, 1.0f / std::sqrt(float(vdim)), rng);
  return w;
}

// The delta rule alone, with and without the transition output, on layer-like inputs.
// Returns the dense summary (T, S) of the last run, for timing its application.
pic::LinearSummary time_delta_rule(const ComposeOptions& a, std::mt19937& rng, ComposeResult& r) {
  const int T = a.tokens, Hk = a.key_heads, Hv = a.value_heads, d = a.head_dim;
  Tensor q = random_tensor({T, Hk, d}, 1.0f, rng), k = random_tensor({T, Hk, d}, 1.0f, rng);
  kernels::l2_normalize_rows(q.data(), T * Hk, d, 1e-6f, 1.0f / std::sqrt(float(d)));
  kernels::l2_normalize_rows(k.data(), T * Hk, d, 1e-6f, 1.0f);
  const Tensor v = random_tensor({T, Hv, d}, 1.0f, rng);
  Tensor g({T, Hv}), beta({T, Hv});
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] = -0.1f * u(rng);
  for (int64_t i = 0; i < beta.numel(); ++i) beta.data()[i] = u(rng);
  Tensor state({Hv, d, d}), o({T, Hv, d}), transition({Hv, d, d});
  const kernels::DeltaRuleDims dims{T, Hk, Hv, d, d};
  r.delta_rule_s = median_seconds(a.reps, [&] {
    fill_zero(state);
    kernels::gated_delta_rule_chunked(dims, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                      state.data(), o.data());
  });
  r.delta_rule_with_t_s = median_seconds(a.reps, [&] {
    fill_zero(state);
    kernels::gated_delta_rule_chunked(dims, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                      state.data(), o.data(), transition.data());
  });
  pic::LinearSummary sum;
  sum.structure = pic::TStructure::Dense;
  sum.heads = Hv;
  sum.dk = d;
  sum.dv = d;
  sum.tokens = T;
  sum.t.assign(transition.data(), transition.data() + transition.numel());
  sum.s.assign(state.data(), state.data() + state.numel());
  return sum;
}

std::vector<SummaryBytes> summary_byte_table(int heads, int d, int tokens) {
  const std::pair<pic::TStructure, int> forms[] = {{pic::TStructure::Scalar, 0},
                                                   {pic::TStructure::Diagonal, 0},
                                                   {pic::TStructure::Dense, 0},
                                                   {pic::TStructure::LowRank, tokens}};
  std::vector<SummaryBytes> out;
  for (const auto& [st, rank] : forms) {
    SummaryBytes row{pic::structure_name(st), {}};
    for (auto dt : {DType::F32, DType::BF16, DType::F16})
      row.by_dtype.emplace_back(dtype_name(dt), pic::summary_bytes(st, heads, d, d, rank, dt));
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

ComposeResult run_compose(const ComposeOptions& a) {
  HYPIC_REQUIRE(a.tokens > 0 && a.reps > 0 && a.hidden > 0 && a.key_heads > 0 &&
                    a.value_heads > 0 && a.head_dim > 0 && a.value_heads % a.key_heads == 0,
                "bench compose: sizes must be positive and value heads a multiple of key heads");
  model::ModelConfig cfg = a.base;
  cfg.hidden_size = a.hidden;
  cfg.linear_num_key_heads = a.key_heads;
  cfg.linear_num_value_heads = a.value_heads;
  cfg.linear_key_head_dim = a.head_dim;
  cfg.linear_value_head_dim = a.head_dim;
  const int T = a.tokens, Hv = a.value_heads, d = a.head_dim;
  const int conv_dim = cfg.linear_conv_dim(), K = cfg.linear_conv_kernel_dim;
  ComposeResult r;

  std::mt19937 rng(3);
  const model::GdnWeights w = random_gdn_weights(cfg, rng);
  const Tensor x = random_tensor({T, a.hidden}, 1.0f, rng);
  Tensor out({T, a.hidden});
  model::Workspace ws;
  r.layer_forward_s = median_seconds(a.reps, [&] {
    model::LayerCache cache;
    cache.kind = model::LayerKind::Linear;
    cache.state = Tensor({Hv, d, d});
    cache.conv = Tensor({K - 1, conv_dim});
    model::gdn_layer(kernels::host_backend(), cfg, w, x.data(), out.data(), T, cache, ws);
  });

  const pic::LinearSummary sum = time_delta_rule(a, rng, r);
  r.build_summary_s = std::max(0.0, r.delta_rule_with_t_s - r.delta_rule_s);
  r.build_percent_of_layer = 100.0 * r.build_summary_s / r.layer_forward_s;

  // Applying one cached summary (dense T, as GDN's natural structure) to a running state.
  Tensor running = random_tensor({Hv, d, d}, 1.0f, rng);
  r.apply_s = median_seconds(std::max(a.reps, 20),
                             [&] { pic::apply(kernels::host_backend(), sum, running.data()); });

  r.blas = kernels::blas_info();
  r.summary_bytes = summary_byte_table(Hv, d, T);
  return r;
}

}  // namespace hypic::bench
