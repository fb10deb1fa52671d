#include "model/forward.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "model/layers_lightning.hpp"

namespace hypic::model {
namespace {
constexpr int kDeltaRuleChunk = 64;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// A NaN or Inf logit makes every pick meaningless (argmax then returns id 0 again and
// again), so it ends the run with one line instead of a silent wrong answer.
void require_finite_logits(const Tensor& logits, int64_t first_position) {
  if (logits.numel() == 0) return;
  const int64_t vocab = logits.dim(1);
  const float* x = logits.data();
  for (int64_t i = 0; i < logits.numel(); ++i) {
    if (std::isfinite(x[i])) continue;
    const int64_t row = i / vocab;
    throw Error(std::string("the model's logits are not finite (") +
                (std::isnan(x[i]) ? "NaN" : "Inf") + " for token id " + std::to_string(i % vocab) +
                " at position " + std::to_string(first_position + row) +
                "): its weights or activations hold NaN or Inf values; `hypic model check "
                "--model DIR` names the first non-finite weight");
  }
}

// Refuses, before allocating, a logits tensor larger than the machine's memory (std::bad_alloc
// would say nothing about which size was too big).
void require_logits_fit(int64_t rows, int64_t vocab) {
  const double bytes = static_cast<double>(rows) * static_cast<double>(vocab) * sizeof(float);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  const double memory = static_cast<double>(pages) * static_cast<double>(page);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f GiB, more than this machine's %.1f GiB", bytes / kGiB,
                memory / kGiB);
  HYPIC_REQUIRE(bytes <= memory, "the logits of " + std::to_string(rows) + " tokens x " +
                                     std::to_string(vocab) + " vocabulary entries need " + buf +
                                     " of memory; give fewer tokens");
}

// HYPIC_LAST_LAYER_ALL_ROWS=1 runs the last layer over every row of a block, as before the
// layer learnt to carry on only the rows read after it: for measurements (bench forward)
// only, the rows read are the same bits either way (tested).
bool last_layer_all_rows() {
  static const bool all = [] {
    const char* v = std::getenv("HYPIC_LAST_LAYER_ALL_ROWS");
    return v != nullptr && std::string(v) == "1";
  }();
  return all;
}

// MiniMax's residual from the normed stream, h ← alpha · xn + beta · layer(xn): before the
// layer (which adds its output into h) h ← (alpha / beta) · xn, after it h ← beta · h.
void residual_before(const kernels::Backend& be, const float* xn, float* h, size_t n, double alpha,
                     double beta) {
  be.axpby(xn, h, static_cast<int64_t>(n), static_cast<float>(alpha / beta), 0.0f);
}
void residual_after(const kernels::Backend& be, float* h, size_t n, double beta) {
  if (beta != 1.0) be.axpby(h, h, static_cast<int64_t>(n), static_cast<float>(beta), 0.0f);
}

}  // namespace

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t argmax_no_repeat(const float* x, int64_t n, const std::vector<int32_t>& generated,
                         int ngram) {
  const int64_t len = static_cast<int64_t>(generated.size());
  if (ngram <= 0 || len < ngram - 1) return argmax(x, n);
  // The tokens that followed an earlier occurrence of the last ngram-1 generated tokens.
  const int64_t tail = ngram - 1;
  std::vector<int32_t> banned;
  for (int64_t i = 0; i + tail < len; ++i) {
    if (std::equal(generated.begin() + i, generated.begin() + i + tail, generated.end() - tail))
      banned.push_back(generated[static_cast<size_t>(i + tail)]);
  }
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (best >= 0 && !(x[i] > x[best])) continue;
    if (std::find(banned.begin(), banned.end(), static_cast<int32_t>(i)) != banned.end()) continue;
    best = i;
  }
  return best >= 0 ? static_cast<int32_t>(best) : argmax(x, n);
}

Model::Model(ModelConfig cfg, ModelWeights weights, const kernels::Backend& backend)
    : cfg_(std::move(cfg)), weights_(std::move(weights)), backend_(&backend) {
  HYPIC_REQUIRE(static_cast<int>(weights_.layers.size()) == cfg_.num_hidden_layers,
                "model weights have " + std::to_string(weights_.layers.size()) +
                    " layers, config says " + std::to_string(cfg_.num_hidden_layers));
  HYPIC_REQUIRE(weights_.embed.device() == backend.device(),
                std::string("the model's weights are in ") + device_name(weights_.embed.device()) +
                    " memory but the " + backend.name() + " backend computes in " +
                    device_name(backend.device()) + " memory");
  if (backend.device() != Device::Host) ws_.use_device(backend_);
}

void Model::set_max_block_tokens(int n) {
  HYPIC_REQUIRE(
      n >= kDeltaRuleChunk && n % kDeltaRuleChunk == 0,
      "max block tokens must be a positive multiple of " + std::to_string(kDeltaRuleChunk));
  max_block_ = n;
}

void Model::run_block(const int32_t* tokens, int T, InferenceCache& cache, int logit_rows,
                      float* logits) {
  std::vector<Span> one{{0, T, 0}};
  run_spans(tokens, one, {-1}, {0}, nullptr, cache, logit_rows, logits);
}

void Model::run_spans(const int32_t* tokens, std::vector<Span>& spans,
                      const std::vector<int>& splice_ids, const std::vector<int64_t>& spliced,
                      const SpliceFn* splice, InferenceCache& cache, int logit_rows,
                      float* logits) {
  const int T = spans.back().end;
  const int n_spans = static_cast<int>(spans.size());
  const int hidden = cfg_.hidden_size;
  const int vocab = cfg_.vocab_size;
  const kernels::Backend& be = *backend_;
  const size_t n = static_cast<size_t>(T) * hidden;
  const bool on_host = be.device() == Device::Host;
  float* h = ws_.floats(Workspace::kX, n);  // the residual stream
  float* xn = ws_.floats(Workspace::kY, n);

  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < T; ++t)
    HYPIC_REQUIRE(tokens[t] >= 0 && tokens[t] < vocab, "token id " + std::to_string(tokens[t]) +
                                                           " outside the vocabulary [0, " +
                                                           std::to_string(vocab) + ")");
  const int32_t* ids = tokens;
  if (!on_host) {  // the lookup reads the ids in device memory
    int32_t* dev_ids = ws_.token_ids(static_cast<size_t>(T));
    be.copy_from_host(dev_ids, tokens, sizeof(int32_t) * static_cast<size_t>(T));
    ids = dev_ids;
  }
  be.gather_rows(weights_.embed, ids, T, h);
  ws_.times.embed_norms += seconds_since(t0);
  capture(h, T);

  int64_t pos = cache.n_tokens;
  for (int i = 0; i < n_spans; ++i) {
    spans[static_cast<size_t>(i)].pos0 = pos;
    pos += spans[static_cast<size_t>(i)].rows() + spliced[static_cast<size_t>(i)];
  }
  // The last layer carries on only the rows read after it: the logit rows, and at least the
  // last row (last_hidden). Every row when the residual stream is captured.
  const int last_first =
      capture_ != nullptr || last_layer_all_rows() ? 0 : T - std::max(1, std::min(T, logit_rows));
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    // A MoE layer's router sees every row: an expert's group is every token routed to it, and
    // its size decides the group product's tiles, so the bits of the rows read. There the
    // attention part and the norms run every row, and only the experts are cut down.
    const int first_ffn = l + 1 == cfg_.num_hidden_layers ? last_first : 0;
    const int first = lw.is_moe ? 0 : first_ffn;
    LayerCache& lc = cache.layers[static_cast<size_t>(l)];
    t0 = std::chrono::steady_clock::now();
    rms_norm(be, cfg_, h, lw.input_norm, xn, T, hidden);
    const bool from_norm = cfg_.residual_from_norm;
    const bool full = lw.kind == LayerKind::FullAttention;
    const double alpha = full ? cfg_.full_attn_alpha : cfg_.linear_attn_alpha;
    const double beta = full ? cfg_.full_attn_beta : cfg_.linear_attn_beta;
    if (from_norm) residual_before(be, xn, h, n, alpha, beta);
    ws_.times.embed_norms += seconds_since(t0);
    const AfterSpan after = [&](int i, LayerCache& c) {
      const int id = splice_ids[static_cast<size_t>(i)];
      if (id >= 0) (*splice)(id, l, c);
    };
    const AfterSpan* hook = splice != nullptr ? &after : nullptr;
    switch (lw.kind) {
      case LayerKind::Linear:
        gdn_layer(be, cfg_, lw.linear, xn, h, spans.data(), n_spans, lc, ws_, hook, first);
        break;
      case LayerKind::FullAttention:
        if (!lw.ring.qkv.empty())  // Ring-linear's softmax layers
          ring_attention_layer(be, cfg_, lw.ring, xn, h, spans.data(), n_spans, lc, ws_, hook,
                               first);
        else
          attention_layer(be, cfg_, lw.attn, xn, h, spans.data(), n_spans, lc, ws_, hook, first);
        break;
      case LayerKind::Lightning:
        lightning_layer(be, cfg_, l, lw.lightning, xn, h, spans.data(), n_spans, lc, ws_, hook,
                        first);
        break;
      case LayerKind::RingLinear:
        ring_linear_layer(be, cfg_, l, lw.ring, xn, h, spans.data(), n_spans, lc, ws_, hook, first);
        break;
      case LayerKind::Kda:
        kda_layer(be, cfg_, lw.kda, xn, h, spans.data(), n_spans, lc, ws_, hook, first);
        break;
      case LayerKind::Mla:
        mla_layer(be, cfg_, lw.mla, xn, h, spans.data(), n_spans, lc, ws_, hook, first);
        break;
    }

    // From here on rows do not mix: the rows before `first` are left behind.
    t0 = std::chrono::steady_clock::now();
    const size_t f0 = static_cast<size_t>(first) * hidden, kept = n - f0;
    if (from_norm) residual_after(be, h + f0, kept, beta);
    rms_norm(be, cfg_, h + f0, lw.post_attn_norm, xn + f0, T - first, hidden);
    if (from_norm) residual_before(be, xn + f0, h + f0, kept, cfg_.mlp_alpha, cfg_.mlp_beta);
    ws_.times.embed_norms += seconds_since(t0);
    if (lw.is_moe)
      moe_layer(be, cfg_, lw.moe, xn, h, T, ws_, first_ffn);
    else
      mlp_layer(be, lw.mlp, xn, h, T, hidden, ws_, first);
    if (from_norm) residual_after(be, h + f0, kept, cfg_.mlp_beta);
    capture(h, T);
  }
  cache.n_tokens = pos;
  last_hidden_.resize(static_cast<size_t>(hidden));
  be.copy_to_host(last_hidden_.data(), h + static_cast<size_t>(T - 1) * hidden,
                  sizeof(float) * hidden);

  // Final norm and lm_head only for the rows whose logits are wanted.
  if (logit_rows == 0) return;
  t0 = std::chrono::steady_clock::now();
  const int first = T - logit_rows;
  rms_norm(be, cfg_, h + static_cast<size_t>(first) * hidden, weights_.final_norm, xn, logit_rows,
           hidden);
  ws_.times.embed_norms += seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const size_t logit_floats = static_cast<size_t>(logit_rows) * vocab;
  float* dev_logits = on_host ? logits : ws_.floats(Workspace::kZ, logit_floats);
  be.linear(xn, weights_.output_matrix(), dev_logits, logit_rows, vocab, hidden, false);
  if (!on_host) be.copy_to_host(logits, dev_logits, sizeof(float) * logit_floats);
  ws_.times.lm_head += seconds_since(t0);
}

void Model::capture(const float* h, int T) {
  if (capture_ == nullptr) return;
  Tensor t({T, cfg_.hidden_size});
  backend_->copy_to_host(t.data(), h, t.bytes());
  capture_->push_back(std::move(t));
}

Tensor Model::prefill(const std::vector<int32_t>& tokens, InferenceCache& cache, LogitsMode mode) {
  HYPIC_REQUIRE(!tokens.empty(), "prefill needs at least one token");
  HYPIC_REQUIRE(static_cast<int>(cache.layers.size()) == cfg_.num_hidden_layers,
                "inference cache does not belong to this model (layer count differs)");
  for (const LayerCache& lc : cache.layers) {
    const Tensor& t = is_linear_kind(lc.kind) ? lc.state : lc.k;
    HYPIC_REQUIRE(t.device() == backend_->device(),
                  std::string("the inference cache is in ") + device_name(t.device()) +
                      " memory but the model computes in " + device_name(backend_->device()) +
                      " memory (make it with Model::new_cache())");
  }
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t vocab = cfg_.vocab_size;
  const int64_t pos0 = cache.n_tokens;
  if (mode == LogitsMode::All) require_logits_fit(T, vocab);
  if (T > 1)  // a decode step's single row grows the caches geometrically instead
    for (LayerCache& lc : cache.layers) lc.reserve_kv(pos0 + T);
  Tensor logits({mode == LogitsMode::All ? T : mode == LogitsMode::Last ? 1 : 0, vocab});
  for (int64_t b0 = 0; b0 < T; b0 += max_block_) {
    const int n = static_cast<int>(std::min<int64_t>(max_block_, T - b0));
    if (mode == LogitsMode::All)
      run_block(tokens.data() + b0, n, cache, n, logits.data() + b0 * vocab);
    else if (mode == LogitsMode::None)
      run_block(tokens.data() + b0, n, cache, 0, nullptr);
    else  // only the very last row's logits are wanted
      run_block(tokens.data() + b0, n, cache, b0 + n == T ? 1 : 0, logits.data());
  }
  require_finite_logits(logits, mode == LogitsMode::All ? pos0 : pos0 + T - 1);
  return logits;
}

Tensor Model::prefill_windows(const std::vector<Window>& windows, InferenceCache& cache,
                              const SpliceFn& splice, LogitsMode mode) {
  HYPIC_REQUIRE(static_cast<int>(cache.layers.size()) == cfg_.num_hidden_layers,
                "inference cache does not belong to this model (layer count differs)");
  HYPIC_REQUIRE(mode != LogitsMode::All, "prefill_windows returns the last token's logits only");
  const bool want_last = mode == LogitsMode::Last;
  HYPIC_REQUIRE(!want_last || (!windows.empty() && windows.back().n > 0),
                "prefill_windows: logits need a last window with tokens");
  Tensor logits({want_last ? 1 : 0, static_cast<int64_t>(cfg_.vocab_size)});
  int64_t logits_position = 0;
  int64_t total = cache.n_tokens;  // the K/V rows once every window and splice is in
  for (const Window& win : windows) total += win.n + win.spliced;
  for (LayerCache& lc : cache.layers) lc.reserve_kv(total);
  // Blocks of whole windows up to max_block_ rows; a longer window is cut into pieces, the
  // splice after its last piece only.
  std::vector<int32_t> tokens;
  std::vector<Span> spans;
  std::vector<int> ids;
  std::vector<int64_t> spliced;
  // `last`: the block that ends with the last window, whose last row's logits are wanted.
  auto flush = [&](bool last) {
    if (spans.empty()) return;
    if (spans.back().end == 0) {  // empty windows only: nothing to run, splice every layer
      for (int l = 0; l < cfg_.num_hidden_layers; ++l)
        for (int id : ids)
          if (id >= 0) splice(id, l, cache.layers[static_cast<size_t>(l)]);
      for (int64_t n : spliced) cache.n_tokens += n;
    } else if (last && want_last) {
      run_spans(tokens.data(), spans, ids, spliced, &splice, cache, 1, logits.data());
      logits_position = cache.n_tokens - spliced.back() - 1;
    } else {
      run_spans(tokens.data(), spans, ids, spliced, &splice, cache, 0, nullptr);
    }
    tokens.clear();
    spans.clear();
    ids.clear();
    spliced.clear();
  };
  for (size_t w = 0; w < windows.size(); ++w) {
    const Window& win = windows[w];
    HYPIC_REQUIRE(win.n >= 0 && win.spliced >= 0, "prefill_windows: negative window size");
    const size_t max_rows = static_cast<size_t>(max_block_);
    // A window that does not fit starts a block; a longer one is cut at the same places as
    // its plain prefill would be.
    if (tokens.size() + win.n > max_rows) flush(false);
    int done = 0;
    do {
      if (tokens.size() == max_rows) flush(false);
      const int take = std::min(static_cast<int>(max_rows - tokens.size()), win.n - done);
      const int begin = static_cast<int>(tokens.size());
      tokens.insert(tokens.end(), win.tokens + done, win.tokens + done + take);
      done += take;
      const bool last = done == win.n;
      spans.push_back({begin, begin + take, 0});
      ids.push_back(last ? static_cast<int>(w) : -1);
      spliced.push_back(last ? win.spliced : 0);
    } while (done < win.n);
  }
  flush(true);
  require_finite_logits(logits, logits_position);
  return logits;
}

Tensor Model::decode_step(int32_t token, InferenceCache& cache) {
  return prefill({token}, cache, LogitsMode::Last);
}

std::vector<int32_t> Model::generate_greedy(const std::vector<int32_t>& prompt, int n_new,
                                            InferenceCache& cache) {
  std::vector<int32_t> out;
  if (n_new <= 0) return out;
  Tensor logits = prefill(prompt, cache, LogitsMode::Last);
  for (LayerCache& lc : cache.layers) lc.reserve_kv(cache.n_tokens + n_new - 1);  // in place
  for (int i = 0; i < n_new; ++i) {
    const int32_t next = argmax(logits.data(), logits.numel());
    out.push_back(next);
    if (i + 1 < n_new) logits = decode_step(next, cache);
  }
  return out;
}

}  // namespace hypic::model
