#pragma once
// Per-layer inference caches of the hybrid models: what a forward pass leaves behind so the
// next one continues exactly where it stopped (decode, chunked prefill), and what the PIC
// engine composes and splices segment entries into (src/pic/engine.hpp).
#include <cstdint>
#include <vector>

#include "hypic/tensor.hpp"
#include "model/config.hpp"

namespace hypic::model {

struct LayerCache {
  LayerKind kind = LayerKind::Linear;

  // Linear (Gated DeltaNet) layers; lightning layers (MiniMax) have the state only, [H, hd, hd],
  // and their transition is [H] (one scalar per head).
  Tensor state;  // [Hv, dk, dv] recurrent state, key-major (the delta-rule kernel's layout)
  Tensor conv;   // [K-1, conv_dim] last K-1 pre-conv inputs, token-major, oldest first
  // Transition capture for segment summaries (MATH.md §2): while capture_transition is set,
  // every forward block over this layer left-multiplies `transition` by its tokens'
  // T = A_n ⋯ A_1, so it holds [Hv, dk, dk] (key-major, per value head) the product over
  // all tokens since it was last emptied (an empty tensor counts as the identity).
  bool capture_transition = false;
  Tensor transition;
  // KDA only: with capture_lowrank also set, the capture is one block of r tokens kept in
  // the WY form T = diag(transition) − transition_xᵀ · transition_y (transition [Hv, dk],
  // x and y [Hv, r, dk]; pic/segment_entry.hpp decides when: the smaller of the two forms).
  bool capture_lowrank = false;
  Tensor transition_x, transition_y;

  // Full-attention layers: one row per cached token, at absolute positions 0 … n-1.
  Tensor k;  // [n, Hkv, hd] after k_norm and RoPE at the token's absolute position
  Tensor v;  // [n, Hkv, hd] as projected
  // MLA layers (kind Mla): k holds the latent rows [n, 1, r + rope] (keys and values at once,
  // no RoPE); v stays empty.

  int64_t kv_tokens() const { return k.empty() ? 0 : k.dim(0); }
  // Appends T rows (of Hkv·hd floats each) to k and v (MLA: to k only; v_rows null), rows in
  // the cache's memory. Host and device caches both grow in place with amortised (geometric)
  // growth (Tensor::append_rows), so decode steps re-allocate O(log n) times, not every step;
  // a device cache needs `device`, its allocator.
  void append_kv(const float* k_rows, const float* v_rows, int64_t T,
                 const Allocator* device = nullptr);
  // Room for `tokens` K/V rows in all (host or device), so that a prefill that knows its
  // length appends without moving what is cached (no-op for linear layers).
  void reserve_kv(int64_t tokens);
};

struct InferenceCache {
  std::vector<LayerCache> layers;
  int64_t n_tokens = 0;  // tokens the caches summarise; the next token's position

  // Zero states and empty K/V for every layer of the model: the cache of an empty prefix. In
  // host memory, or in the memory of `device` (a backend) when given.
  static InferenceCache empty(const ModelConfig& cfg, const Allocator* device = nullptr);
  size_t bytes() const;
};

}  // namespace hypic::model
