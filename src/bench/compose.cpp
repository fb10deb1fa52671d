#include "bench/compose.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "model/cache.hpp"
#include "model/checkpoint.hpp"
#include "model/layers.hpp"
#include "model/layers_kda.hpp"
#include "model/layers_lightning.hpp"
#include "model/layers_ring.hpp"
#include "model/presets.hpp"
#include "pic/entry_forms.hpp"
#include "pic/linear_summary.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::bench {
namespace {
using model::LayerKind;

const char* kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Linear:
      return "gated deltanet";
    case LayerKind::Kda:
      return "kda";
    case LayerKind::Lightning:
      return "lightning";
    case LayerKind::RingLinear:
      return "lightning (RoPE)";
    default:
      return "attention";
  }
}

// Scalar decay, no erase: T is one number per head (MiniMax's and Ring's lightning layers).
bool scalar_kind(LayerKind k) {
  return k == LayerKind::Lightning || k == LayerKind::RingLinear;
}

// The config with the size overrides applied (0 keeps a size). Lightning kinds read
// num_attention_heads / head_dim; the linear_* fields mirror them.
model::ModelConfig sized_config(const ComposeOptions& a, LayerKind kind) {
  model::ModelConfig c = a.base;
  if (a.hidden > 0) c.hidden_size = a.hidden;
  if (scalar_kind(kind)) {
    HYPIC_REQUIRE(a.key_heads == 0 || a.key_heads == a.value_heads,
                  "bench compose: lightning layers have one head count (--value-heads)");
    if (a.value_heads > 0) c.num_attention_heads = a.value_heads;
    if (a.head_dim > 0) c.head_dim = a.head_dim;
    c.linear_num_key_heads = c.linear_num_value_heads = c.num_attention_heads;
    c.linear_key_head_dim = c.linear_value_head_dim = c.head_dim;
    if (kind == LayerKind::RingLinear) {
      c.num_key_value_heads = c.num_attention_heads;
      HYPIC_REQUIRE(
          c.group_norm_size > 0 && (c.num_attention_heads * c.head_dim) % c.group_norm_size == 0,
          "bench compose: Ring's norm groups must divide heads x head dim");
      HYPIC_REQUIRE(c.rotary_dim() >= 2 && c.rotary_dim() % 2 == 0 && c.rotary_dim() <= c.head_dim,
                    "bench compose: Ring's rotary part must be even and within head_dim");
    }
  } else {
    if (a.key_heads > 0) c.linear_num_key_heads = a.key_heads;
    if (a.value_heads > 0) c.linear_num_value_heads = a.value_heads;
    if (a.head_dim > 0) c.linear_key_head_dim = c.linear_value_head_dim = a.head_dim;
    if (kind == LayerKind::Kda)
      HYPIC_REQUIRE(c.linear_num_key_heads == c.linear_num_value_heads,
                    "bench compose: KDA has as many key as value heads");
  }
  HYPIC_REQUIRE(c.hidden_size > 0 && c.linear_num_key_heads > 0 && c.linear_num_value_heads > 0 &&
                    c.linear_key_head_dim > 0 && c.linear_value_head_dim > 0 &&
                    c.linear_num_value_heads % c.linear_num_key_heads == 0,
                "bench compose: sizes must be positive and value heads a multiple of key heads");
  return c;
}

// A one-layer copy of the config (no experts, a minimal MLP and vocabulary): the layer's
// tensors keep their real shapes and the initialiser's values (decays, gates) without the
// rest of the model, and its cache is that layer's alone.
model::ModelConfig one_layer_config(const model::ModelConfig& cfg, LayerKind kind) {
  model::ModelConfig one = cfg;
  one.num_hidden_layers = 1;
  one.layer_types = {kind};
  one.num_experts = 0;
  one.num_experts_per_tok = 0;
  one.shared_expert_intermediate_size = 0;
  one.mlp_only_layers.clear();
  one.intermediate_size = 1;
  one.vocab_size = 1;
  one.tie_word_embeddings = true;
  return one;
}

// Random weights of the layer through the loader's own layout (model::random_tensor draws
// each tensor as `hypic model init` does, from the full config).
model::LayerWeights one_layer_weights(const model::ModelConfig& cfg,
                                      const model::ModelConfig& one) {
  model::ModelWeights w = model::weights_from_hf(
      one, [&](const model::HfTensor& t) { return model::random_tensor(cfg, t, 17); });
  return std::move(w.layers.front());
}

void run_layer(const kernels::Backend& be, const model::ModelConfig& cfg, int l,
               const model::LayerWeights& w, const float* x, float* out,
               const std::vector<model::Span>& spans, model::LayerCache& cache,
               model::Workspace& ws, const model::AfterSpan* after) {
  const int n = static_cast<int>(spans.size());
  switch (w.kind) {
    case LayerKind::Linear:
      model::gdn_layer(be, cfg, w.linear, x, out, spans.data(), n, cache, ws, after);
      return;
    case LayerKind::Kda:
      model::kda_layer(be, cfg, w.kda, x, out, spans.data(), n, cache, ws, after);
      return;
    case LayerKind::Lightning:
      model::lightning_layer(be, cfg, l, w.lightning, x, out, spans.data(), n, cache, ws, after);
      return;
    case LayerKind::RingLinear:
      model::ring_linear_layer(be, cfg, l, w.ring, x, out, spans.data(), n, cache, ws, after);
      return;
    default:
      throw Error("bench compose: layer " + std::to_string(l) + " is not a linear-attention layer");
  }
}

std::vector<SummaryBytes> summary_byte_table(LayerKind kind, int heads, int dk, int dv, int rank,
                                             pic::TStructure chosen) {
  const pic::TStructure forms[] = {pic::TStructure::Scalar, pic::TStructure::Diagonal,
                                   pic::TStructure::Dense, pic::TStructure::LowRank};
  std::vector<SummaryBytes> out;
  for (pic::TStructure st : forms) {
    SummaryBytes row{pic::structure_name(st), false, st == chosen, {}};
    // Scalar decay: every form holds T; delta rules: the dense matrix and its WY form.
    row.exact = scalar_kind(kind)
                    ? st != pic::TStructure::LowRank
                    : (st == pic::TStructure::Dense || st == pic::TStructure::LowRank);
    for (auto dt : {DType::F32, DType::BF16, DType::F16})
      row.by_dtype.emplace_back(dtype_name(dt), pic::summary_bytes(st, heads, dk, dv, rank, dt));
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

ComposeResult run_compose(const ComposeOptions& a) {
  HYPIC_REQUIRE(a.tokens > 0 && a.reps > 0 && a.junction >= 0 && a.junction < a.tokens,
                "bench compose: tokens and reps must be positive, 0 <= junction < tokens");
  const model::ModelConfig& base = a.base;
  int l = a.layer;
  if (l < 0)
    for (int i = 0; i < base.num_hidden_layers && l < 0; ++i)
      if (model::is_linear_kind(base.layer_types.at(static_cast<size_t>(i)))) l = i;
  HYPIC_REQUIRE(l >= 0 && l < base.num_hidden_layers &&
                    model::is_linear_kind(base.layer_types.at(static_cast<size_t>(l))),
                "bench compose: the model has no linear-attention layer " +
                    (a.layer < 0 ? std::string("at all") : std::to_string(a.layer)));
  const LayerKind kind = base.layer_types[static_cast<size_t>(l)];
  const model::ModelConfig cfg = sized_config(a, kind);
  const int T = a.tokens, w = a.junction, cached = T - w;
  const int Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
            dv = cfg.linear_value_head_dim;

  ComposeResult r;
  r.arch = model::arch_name(cfg.arch);
  r.layer_kind = kind_name(kind);
  r.layer = l;
  r.hidden = cfg.hidden_size;
  r.key_heads = cfg.linear_num_key_heads;
  r.value_heads = Hv;
  r.dk = dk;
  r.dv = dv;

  // The form the entry keeps (compute_entry's choice) and whether the layer builds it low-rank.
  const pic::TStructure form = pic::entry_t_structure(kind, cached, dk);
  r.t_form = pic::structure_name(form);
  r.lowrank_max_tokens = pic::entry_t_structure(kind, 1, dk) == pic::TStructure::LowRank
                             ? pic::lowrank_max_tokens(dk)
                             : 0;

  const kernels::Backend& be = kernels::host_backend();
  const model::ModelConfig one = one_layer_config(cfg, kind);
  model::LayerWeights lw = one_layer_weights(cfg, one);
  if (a.remembering && kind == LayerKind::Linear) {  // as tests/unit/pic_test_util.hpp
    std::mt19937 arng(5);
    std::uniform_real_distribution<float> log_a(std::log(0.005f), std::log(0.1f));
    for (float& v : lw.linear.A_log.values()) v = log_a(arng);
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor x({T, cfg.hidden_size});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = normal(rng);
  Tensor out({T, cfg.hidden_size});
  model::Workspace ws;
  model::LayerCache cache = std::move(model::InferenceCache::empty(one).layers.front());
  // As compute_entry: the junction window through the layer, then the cached tokens (the
  // capturing run keeps S_w and captures T over them only); one call each.
  Tensor state_w;
  auto call = [&](int begin, int end) {
    const std::vector<model::Span> span = {{0, end - begin, begin}};
    const size_t at = static_cast<size_t>(begin) * cfg.hidden_size;
    run_layer(be, cfg, l, lw, x.data() + at, out.data() + at, span, cache, ws, nullptr);
  };
  auto run = [&](bool with_t, double& total, double& rule) {
    std::memset(cache.state.data(), 0, cache.state.bytes());
    if (cache.conv.rank() > 0) std::memset(cache.conv.data(), 0, cache.conv.bytes());
    cache.transition = Tensor();
    cache.transition_x = Tensor();
    cache.transition_y = Tensor();
    ws.times.clear();
    const auto t0 = Clock::now();
    if (w > 0) call(0, w);
    if (with_t) {
      if (w > 0) state_w = cache.state;
      cache.capture_transition = true;
      cache.capture_lowrank = form == pic::TStructure::LowRank;
    }
    call(w, T);
    total = seconds_since(t0);
    rule = ws.times.gdn_rule;
    cache.capture_transition = cache.capture_lowrank = false;
  };
  double total = 0, rule = 0;
  run(false, total, rule);  // warm-up of both
  run(true, total, rule);
  std::vector<double> plain, plain_rule, with_t, with_t_rule;
  for (int i = 0; i < a.reps; ++i)
    for (int j = 0; j < 2; ++j) {  // alternate the order, so drift hits both alike
      const bool t_run = (i + j) % 2 == 1;
      run(t_run, total, rule);
      (t_run ? with_t : plain).push_back(total);
      (t_run ? with_t_rule : plain_rule).push_back(rule);
    }
  r.layer_forward_s = upper_median(plain);
  r.layer_forward_with_summary_s = upper_median(with_t);
  r.recurrence_s = upper_median(plain_rule);
  r.recurrence_with_t_s = upper_median(with_t_rule);

  // The summary as the entry keeps it (the last capturing run's T), then the timing of one
  // application of it: S(R|0) = S_n − T·S_w is that op with S_in = −S_w, S0 = S_n.
  run(true, total, rule);
  pic::LinearSummary sum;
  sum.structure = form;
  sum.heads = Hv;
  sum.dk = dk;
  sum.dv = dv;
  sum.tokens = cached;
  sum.t = cache.transition.take_vector();
  if (form == pic::TStructure::LowRank) {
    sum.rank = cached;
    sum.x = cache.transition_x.take_vector();
    sum.y = cache.transition_y.take_vector();
  }
  sum.s.assign(cache.state.data(), cache.state.data() + cache.state.numel());
  Tensor running = cache.state;
  r.apply_s = median_seconds(std::max(a.reps, 20), [&] { pic::apply(be, sum, running.data()); });
  r.s0_s = w > 0 ? r.apply_s : 0.0;
  r.build_summary_s = std::max(0.0, r.recurrence_with_t_s - r.recurrence_s) + r.s0_s;
  r.build_percent_of_layer = 100.0 * r.build_summary_s / r.layer_forward_s;

  r.blas = kernels::blas_info();
  r.summary_bytes = summary_byte_table(kind, Hv, dk, dv, cached, form);
  r.conv_values = cache.conv.rank() > 0 ? cache.conv.numel() : 0;
  r.entry_layer_bytes_bf16 = pic::summary_bytes(form, Hv, dk, dv, sum.rank, DType::BF16) +
                             static_cast<size_t>(r.conv_values) * dtype_size(DType::BF16);
  r.entry_bytes_per_token_bf16 = static_cast<double>(r.entry_layer_bytes_bf16) / cached;

  // Per-head forms of a dense T: the incoming state is what the layer leaves after another
  // segment of as many tokens (fresh random inputs, from a zero state).
  if (form == pic::TStructure::Dense && !a.entry_tolerances.empty()) {
    Tensor xp({T, cfg.hidden_size}), outp({T, cfg.hidden_size});
    for (int64_t i = 0; i < xp.numel(); ++i) xp.data()[i] = normal(rng);
    std::memset(cache.state.data(), 0, cache.state.bytes());
    if (cache.conv.rank() > 0) std::memset(cache.conv.data(), 0, cache.conv.bytes());
    cache.transition = Tensor();
    const std::vector<model::Span> span = {{0, T, 0}};
    run_layer(be, cfg, l, lw, xp.data(), outp.data(), span, cache, ws, nullptr);
    const std::vector<float> s_in = cache.state.to_vector();
    std::vector<float> exact = s_in;
    pic::apply(be, sum, exact.data());
    const double contribution = pic::state_contribution(be, sum, s_in.data());
    double exact_norm = 0;
    for (float v : exact) exact_norm += double(v) * v;
    exact_norm = std::sqrt(exact_norm);
    const size_t s_floats = sum.s.size() + static_cast<size_t>(r.conv_values);
    for (double tol : a.entry_tolerances) {
      EntryFormsRow row;
      row.tolerance = tol;
      row.state_contribution = contribution;
      const pic::PackedT p = pic::pack_t(sum, tol, true);  // fp8 candidates (a bf16 store)
      for (const pic::HeadChoice& c : p.choices) {
        ++row.heads[static_cast<int>(c.form)];
        row.s_fp8_heads += c.s_fp8 ? 1 : 0;
        row.max_bound = std::max(row.max_bound, c.bound);
      }
      row.dense_bytes_bf16 = (sum.t.size() + s_floats) * dtype_size(DType::BF16);
      const size_t t_chosen = p.all_dense() ? sum.t.size() : p.forms.size() + p.packed.size();
      const size_t s_chosen = p.s_forms.empty() ? s_floats
                                                : p.s_forms.size() + p.s_packed.size() +
                                                      static_cast<size_t>(r.conv_values);
      row.chosen_bytes_bf16 = (t_chosen + s_chosen) * dtype_size(DType::BF16);
      pic::LinearSummary approx = sum;
      std::string problem = pic::unpack_t(p.forms, p.packed, approx);
      if (problem.empty() && !p.s_forms.empty())
        problem = pic::unpack_s(p.s_forms, p.s_packed, approx);
      HYPIC_REQUIRE(problem.empty(), "bench compose: " + problem);
      std::vector<float> composed = s_in;
      pic::apply(be, approx, composed.data());
      double err = 0;
      for (size_t i = 0; i < composed.size(); ++i) {
        const double d = double(composed[i]) - exact[i];
        err += d * d;
      }
      row.state_error = exact_norm > 0 ? std::sqrt(err) / exact_norm : 0.0;
      r.entry_forms.push_back(row);
    }
  }
  return r;
}

}  // namespace hypic::bench
