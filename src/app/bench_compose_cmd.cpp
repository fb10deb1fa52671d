// `hypic bench compose`: what position-independent caching costs in a linear layer.
// For one Gated DeltaNet layer: the extra time to produce a segment's transition operator
// alongside the ordinary chunked prefill (S(C|0) is the zero-start final state the prefill
// computes anyway), as a share of the whole layer's forward on the same tokens; the time
// to apply one cached summary; and the bytes of a summary per T structure and dtype.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "common/error.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/linear_attention.hpp"
#include "hypic/kernels/norm.hpp"
#include "model/cache.hpp"
#include "model/layers.hpp"
#include "model/presets.hpp"
#include "pic/linear_summary.hpp"

namespace hypic::app {
namespace {
using Clock = std::chrono::steady_clock;

template <typename F>
double median_seconds(int reps, F&& run) {
  run();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    run();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor random_tensor(std::vector<int64_t> shape, float scale, std::mt19937& rng) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> n(0.0f, scale);
  for (auto& x : t.values()) x = n(rng);
  return t;
}

}  // namespace

void add_bench_compose(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "compose", "Cost of building and applying linear-layer segment summaries (Gated DeltaNet)");
  struct Args {
    int tokens = 512, hidden = 2048, key_heads = 16, value_heads = 32, head_dim = 128, reps = 5;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--tokens", a->tokens, "segment length")->capture_default_str();
  sub->add_option("--hidden", a->hidden, "hidden size of the layer")->capture_default_str();
  sub->add_option("--key-heads", a->key_heads, "linear key heads")->capture_default_str();
  sub->add_option("--value-heads", a->value_heads, "linear value heads")->capture_default_str();
  sub->add_option("--head-dim", a->head_dim, "key and value head dim")->capture_default_str();
  sub->add_option("--reps", a->reps, "timed repetitions (median)")->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] {
    require(a->tokens > 0 && a->reps > 0 && a->key_heads > 0 && a->head_dim > 0 &&
                a->value_heads % a->key_heads == 0,
            "bench compose: sizes must be positive and value heads a multiple of key heads");
    // One linear layer of Qwen3-Next / Qwen3.5 proportions (defaults: Qwen3-Next-80B's).
    model::ModelConfig cfg = model::preset_config(model::Arch::Qwen3_5, "tiny");
    cfg.hidden_size = a->hidden;
    cfg.linear_num_key_heads = a->key_heads;
    cfg.linear_num_value_heads = a->value_heads;
    cfg.linear_key_head_dim = a->head_dim;
    cfg.linear_value_head_dim = a->head_dim;
    const int T = a->tokens, Hk = a->key_heads, Hv = a->value_heads, d = a->head_dim;
    const int conv_dim = cfg.linear_conv_dim(), vdim = cfg.linear_value_dim();
    const int K = cfg.linear_conv_kernel_dim;

    std::mt19937 rng(3);
    model::GdnWeights w;
    w.in_proj = random_tensor({conv_dim + vdim + 2 * Hv, a->hidden},
                              1.0f / std::sqrt(float(a->hidden)), rng);
    w.conv1d = random_tensor({conv_dim, K}, 0.5f, rng);
    w.dt_bias = Tensor({Hv}, 1.0f);
    w.A_log = random_tensor({Hv}, 0.5f, rng);
    w.norm = Tensor({d}, 1.0f);
    w.out_proj = random_tensor({a->hidden, vdim}, 1.0f / std::sqrt(float(vdim)), rng);
    const Tensor x = random_tensor({T, a->hidden}, 1.0f, rng);
    Tensor out({T, a->hidden});
    model::Workspace ws;
    const double t_layer = median_seconds(a->reps, [&] {
      model::LayerCache cache;
      cache.kind = model::LayerKind::Linear;
      cache.state = Tensor({Hv, d, d});
      cache.conv = Tensor({K - 1, conv_dim});
      model::gdn_layer(kernels::host_backend(), cfg, w, x.data(), out.data(), T, cache, ws);
    });

    // The delta rule alone, with and without the transition output, on layer-like inputs.
    Tensor q = random_tensor({T, Hk, d}, 1.0f, rng), k = random_tensor({T, Hk, d}, 1.0f, rng);
    kernels::l2_normalize_rows(q.data(), T * Hk, d, 1e-6f, 1.0f / std::sqrt(float(d)));
    kernels::l2_normalize_rows(k.data(), T * Hk, d, 1e-6f, 1.0f);
    const Tensor v = random_tensor({T, Hv, d}, 1.0f, rng);
    Tensor g({T, Hv}), beta({T, Hv});
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (auto& x_ : g.values()) x_ = -0.1f * u(rng);
    for (auto& x_ : beta.values()) x_ = u(rng);
    Tensor state({Hv, d, d}), o({T, Hv, d}), transition({Hv, d, d});
    const kernels::DeltaRuleDims dims{T, Hk, Hv, d, d};
    const double t_rule = median_seconds(a->reps, [&] {
      std::fill(state.values().begin(), state.values().end(), 0.0f);
      kernels::gated_delta_rule_chunked(dims, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                        state.data(), o.data());
    });
    const double t_rule_t = median_seconds(a->reps, [&] {
      std::fill(state.values().begin(), state.values().end(), 0.0f);
      kernels::gated_delta_rule_chunked(dims, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                        state.data(), o.data(), transition.data());
    });
    const double build_extra = std::max(0.0, t_rule_t - t_rule);

    // Applying one cached summary (dense T, as GDN's natural structure) to a running state.
    pic::LinearSummary sum;
    sum.structure = pic::TStructure::Dense;
    sum.heads = Hv;
    sum.dk = d;
    sum.dv = d;
    sum.tokens = T;
    sum.t = transition.to_vector();
    sum.s = state.to_vector();
    Tensor running = random_tensor({Hv, d, d}, 1.0f, rng);
    const double t_apply = median_seconds(
        std::max(a->reps, 20), [&] { pic::apply(kernels::host_backend(), sum, running.data()); });

    const auto blas = kernels::blas_info();
    std::printf("BLAS: %s, kernel %s, %d thread(s)\n", blas.library.c_str(), blas.kernel.c_str(),
                blas.threads);
    std::printf("GDN layer: hidden %d, %d key / %d value heads of %d, segment of %d tokens\n",
                a->hidden, Hk, Hv, d, T);
    std::printf("  layer forward (proj, conv, delta rule, norm, out_proj): %8.3f ms\n",
                1e3 * t_layer);
    std::printf("  delta rule alone                                      : %8.3f ms\n",
                1e3 * t_rule);
    std::printf("  delta rule + transition operator T                    : %8.3f ms\n",
                1e3 * t_rule_t);
    std::printf("  building (T, S) costs %.3f ms = %.2f %% of the layer forward (target <= 7 %%)\n",
                1e3 * build_extra, 100.0 * build_extra / t_layer);
    std::printf("  applying one cached summary (S = T*S_in + S0, all heads): %.3f ms\n",
                1e3 * t_apply);

    nlohmann::json bytes = nlohmann::json::object();
    std::printf("bytes per cached summary of one layer (T + S), %d-token segment:\n", T);
    std::printf("  %-9s %12s %12s %12s\n", "structure", "f32", "bf16", "f16");
    const std::pair<pic::TStructure, int> forms[] = {{pic::TStructure::Scalar, 0},
                                                     {pic::TStructure::Diagonal, 0},
                                                     {pic::TStructure::Dense, 0},
                                                     {pic::TStructure::LowRank, T}};
    for (const auto& [st, rank] : forms) {
      std::printf("  %-9s", pic::structure_name(st));
      for (auto dt : {DType::F32, DType::BF16, DType::F16}) {
        const size_t b = pic::summary_bytes(st, Hv, d, d, rank, dt);
        std::printf(" %12zu", b);
        bytes[pic::structure_name(st)][dtype_name(dt)] = b;
      }
      std::printf("\n");
    }
    if (!a->json.empty()) {
      const nlohmann::json j = {{"bench", "compose"},
                                {"tokens", T},
                                {"hidden", a->hidden},
                                {"key_heads", Hk},
                                {"value_heads", Hv},
                                {"head_dim", d},
                                {"layer_forward_ms", 1e3 * t_layer},
                                {"delta_rule_ms", 1e3 * t_rule},
                                {"delta_rule_with_T_ms", 1e3 * t_rule_t},
                                {"build_summary_ms", 1e3 * build_extra},
                                {"build_percent_of_layer", 100.0 * build_extra / t_layer},
                                {"apply_ms", 1e3 * t_apply},
                                {"summary_bytes", bytes},
                                {"blas", blas.library + " " + blas.kernel}};
      write_text_file(a->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
