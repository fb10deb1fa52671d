#pragma once
// The layer kinds of Qwen3-Next / Qwen3.5, each over a block of T tokens' activations
// [T, hidden] (already normalised by the caller), adding its result into the residual
// stream: out += layer(x). Caches are read and advanced in place; scratch memory comes
// from a Workspace, so steady-state forward passes allocate nothing. Every op runs on the
// backend passed in (x, out, caches and weights are that backend's memory).
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/cache.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

namespace hypic::model {

// Adds the seconds since construction (or the last lap) to a ForwardTimes field. On a device
// backend the lap first waits for the queued work, so each part is charged its own kernels
// (synchronize() is a no-op on the host). Every layer file times its parts with it.
class Lap {
 public:
  explicit Lap(const kernels::Backend& be) : be_(be), start_(std::chrono::steady_clock::now()) {}
  void to(double& field) {
    be_.synchronize();
    const auto now = std::chrono::steady_clock::now();
    field += std::chrono::duration<double>(now - start_).count();
    start_ = now;
  }

 private:
  const kernels::Backend& be_;
  std::chrono::steady_clock::time_point start_;
};

// Seconds spent per layer kind and phase, accumulated over forward passes.
struct ForwardTimes {
  double embed_norms = 0;  // embedding lookup, input/post/final RMSNorms, residual capture
  double gdn_proj = 0;     // in_proj (q|k|v|z|b|a)
  double gdn_conv = 0;     // causal conv1d + SiLU
  double gdn_prep = 0;     // q/k/v split, L2 norms, gates
  double gdn_rule = 0;     // chunked (or recurrent) delta rule
  double gdn_out = 0;      // gated RMSNorm + out_proj
  double attn_proj = 0;    // q/k/v projections, q/k norms, RoPE, cache append
  double attn_core = 0;    // softmax attention
  double attn_out = 0;     // sigmoid gate + o_proj
  double mlp = 0;          // dense SwiGLU
  double moe_experts = 0;  // router + routed experts
  double moe_shared = 0;   // shared expert + its gate
  double lm_head = 0;
  double splice = 0;  // AfterSpan hooks (pic: cached segment parts spliced between spans)
  double total() const;
  void clear() { *this = ForwardTimes{}; }
};

// Scratch buffers grown on demand and reused: host vectors, or buffers in a backend's device
// memory once use_device() was called (a grown device buffer keeps its contents, as a vector).
class Workspace {
 public:
  // kX, kY: the residual stream and its normed copy (Model::run_block); kZ: logits and ids.
  enum Slot { kA, kB, kC, kD, kE, kF, kG, kH, kI, kJ, kX, kY, kZ, kSlots };
  void use_device(const Allocator* device) { device_ = device; }
  float* floats(Slot slot, size_t n);
  int* ints(size_t n);
  int32_t* token_ids(size_t n);
  ForwardTimes times;

 private:
  void* device_buffer(Tensor& t, DType dtype, size_t n);

  std::vector<float> buffers_[kSlots];
  std::vector<int> ints_;
  std::vector<int32_t> ids_;
  const Allocator* device_ = nullptr;
  Tensor device_floats_[kSlots], device_ints_, device_ids_;
};

// A block's rows [begin, end) that continue a layer's cache at absolute positions pos0 …
// One span is a plain block. Several spans are the junction windows of a composed prompt
// (MATH.md §5): after span i has passed the layer, the caller appends what follows it in the
// sequence (its segment's cached part) through an AfterSpan hook, so the next span sees it.
// Row-wise work (projections, norms, MLP) runs over all spans at once; what carries state
// across tokens (conv, delta rule, attention over the cache) runs span by span.
struct Span {
  int begin = 0, end = 0;
  int64_t pos0 = 0;
  int rows() const { return end - begin; }
};
// Called with the span's index and the layer's cache after the span has passed the layer.
using AfterSpan = std::function<void(int span, LayerCache& cache)>;
// first_out (the span layers, mlp_layer, moe_layer): the first row whose output is read. The
// rows before it still advance the caches, but what is added to their `out` rows is unspecified
// (the last layer of a block, where only the rows whose logits are read go on: their output
// part, the MLP and the final norm run for those rows alone). The rows from first_out on are
// bit for bit what first_out = 0 gives: products keep the tiles they have in the whole product
// (Backend::linear_from), attention the blocks of queries (AttentionDims::first_query). A MoE
// layer's x must hold every row even so: it routes every token, since an expert's group (whose
// size decides its product's tiles) is every token routed to it; only the experts' products
// and the shared expert are cut down.

// The span steps that Gated DeltaNet and KDA share.
// conv_span_qkv: causal conv1d + SiLU over a span's n rows of `mixed` (the conv channels
// q|k|v, conv_dim = 2·key_dim + value_dim), continuing cache.conv, into conv_out; then q, k
// and v split off it and q, k L2-normalised per head of dk (q also scaled by dk^-½). The times
// go to gdn_conv and gdn_prep.
struct ConvQkvDims {
  int conv_dim = 0, key_dim = 0, value_dim = 0;
  int key_heads = 0, dk = 0;
  int kernel = 0;  // conv taps
};
void conv_span_qkv(const kernels::Backend& be, const ConvQkvDims& d, const Tensor& conv_weight,
                   LayerCache& cache, const float* mixed, float* conv_out, int n, float* q,
                   float* k, float* v, Lap& lap, ForwardTimes& times);
// cache.transition ← block_t · cache.transition per head (heads × dk × dk); the first block's
// is copied in (allocated on the backend's device). `before`: scratch of as many floats.
void accumulate_transition(const kernels::Backend& be, LayerCache& cache, const float* block_t,
                           float* before, int heads, int dk);

// Span by span: requires the cache to end where the span starts, `append(span)` adds the span's
// rows to the cache, then `after` runs (times to attn_proj and splice). Returns the query
// positions for the attention call over the cache: none (empty) when the rows are one block at
// the cache's end (one span, no hook), else one per row, since what `after` appends lies after
// a span's queries.
std::vector<int> cache_spans(const Span* spans, int n_spans, LayerCache& cache,
                             const AfterSpan* after, Lap& lap, ForwardTimes& times,
                             const std::function<void(const Span&)>& append);
// dims.positions ← positions, in the backend's memory (left null when positions is empty). For a
// device backend they are checked here while still host memory (check_query_positions) and
// dims.positions_checked is set, so the device kernel need not copy them back to check them.
void set_query_positions(const kernels::Backend& be, const std::vector<int>& positions,
                         kernels::AttentionDims& dims, Workspace& ws);

// 1.0f in the workspace slot `slot`, in the backend's memory: place_rows' factor.
const float* unit_factor(const kernels::Backend& be, Workspace& ws, Workspace::Slot slot);
// dst[i, 0:cols] = src[i, 0:cols] for i < rows, each with its own leading dimension (a column
// block written into a wider matrix, which copy_strided does not do): `rows` products
// 1x1 · 1xcols with the factor `one` (unit_factor), one batched call: exact, on every backend.
void place_rows(const kernels::Backend& be, const float* one, const float* src, int src_ld,
                float* dst, int dst_ld, int rows, int cols);

// What a softmax attention layer does after its projections (Qwen's gated attention and
// Ring-linear's): span by span, RoPE on the span's q and k at its positions, its K and V
// appended to the cache, then `after`; then every span's queries in one attention call over
// the cache, each seeing the keys up to its own position. q: [T, H, hd] and k: [T, Hkv, hd]
// are rotated in place; v: [T, Hkv, hd]; attn: [T, H, hd]. Times to attn_proj, splice and
// attn_core.
void rope_cache_attend(const kernels::Backend& be, const ModelConfig& cfg, float* q, float* k,
                       const float* v, float* attn, const Span* spans, int n_spans,
                       LayerCache& cache, Workspace& ws, const AfterSpan* after, Lap& lap,
                       int first_out = 0);

// Gated DeltaNet: in_proj → causal conv1d + SiLU → L2-normalised q, k (q · dk^-½) → gates
// β = σ(b), g = −exp(A_log)·softplus(a + dt_bias) → delta rule from cache.state →
// gated RMSNorm with z → out_proj. Advances cache.state and cache.conv (and
// cache.transition when cache.capture_transition is set).
void gdn_layer(const kernels::Backend& be, const ModelConfig& cfg, const GdnWeights& w,
               const float* x, float* out, int T, LayerCache& cache, Workspace& ws);
// The same over spans (after may be null); x and out hold spans.back().end rows.
void gdn_layer(const kernels::Backend& be, const ModelConfig& cfg, const GdnWeights& w,
               const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
               Workspace& ws, const AfterSpan* after, int first_out = 0);

// Gated softmax attention at absolute positions pos0 … pos0+T−1 (pos0 must equal the
// cached tokens): zero-centred q/k RMSNorm, partial RoPE, GQA over cached + new K/V,
// output · sigmoid(gate), o_proj. Appends this block's K (normed, rotated) and V to cache.
void attention_layer(const kernels::Backend& be, const ModelConfig& cfg, const AttentionWeights& w,
                     const float* x, float* out, int T, int64_t pos0, LayerCache& cache,
                     Workspace& ws);
// The same over spans (after may be null): span i's queries attend to everything cached
// before it (earlier spans and what `after` appended) and to themselves, causally.
void attention_layer(const kernels::Backend& be, const ModelConfig& cfg, const AttentionWeights& w,
                     const float* x, float* out, const Span* spans, int n_spans, LayerCache& cache,
                     Workspace& ws, const AfterSpan* after, int first_out = 0);

// SwiGLU MLP: out += down(silu(gate(x)) · up(x)).
void mlp_layer(const kernels::Backend& be, const MlpWeights& w, const float* x, float* out, int T,
               int hidden, Workspace& ws, int first_out = 0);

// The model's RMSNorm of rows of `cols` floats with weight w: zero-centred `(1 + w)` where
// cfg.zero_centred_norm (the Qwen family), plain `w` otherwise. y may alias x.
void rms_norm(const kernels::Backend& be, const ModelConfig& cfg, const float* x, const Tensor& w,
              float* y, int rows, int cols);

// Sparse MoE: the router of cfg (kernels::MoeRouteSpec: softmax top-k, or sigmoid with a
// selection bias and expert groups; renormalised when norm_topk_prob; times
// moe_routed_scaling_factor), routed experts batched per expert, plus the shared expert when
// the model has one: sigmoid(shared_expert_gate · x) · shared_expert(x), or shared_expert(x)
// when there is no gate tensor.
void moe_layer(const kernels::Backend& be, const ModelConfig& cfg, const MoeWeights& w,
               const float* x, float* out, int T, Workspace& ws, int first_out = 0);

}  // namespace hypic::model
