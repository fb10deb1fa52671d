#pragma once
// Floating-point operation counts of a prefill, for benchmark reports (achieved GFLOP/s).
// Counted: every matrix product the forward pass performs (projections, active experts,
// lm_head for the logits requested), causal attention scores and values, and the chunked
// delta rule's products. Not counted: norms, activations, softmax, convolution (O(T·d)).
#include <cstdint>

#include "model/config.hpp"

namespace hypic::model {

struct FlopCount {
  double projections = 0;  // dense projections and MLP / active experts
  double attention = 0;    // QKᵀ and PV of the full-attention layers (causal half)
  double delta_rule = 0;   // chunked gated delta rule products
  double lm_head = 0;
  double total() const { return projections + attention + delta_rule + lm_head; }
};

// FLOPs to prefill `tokens` new tokens after `past` cached ones, producing logits for
// `logit_rows` positions (1 for last-token logits, tokens for all).
FlopCount prefill_flops(const ModelConfig& cfg, int64_t tokens, int64_t past, int64_t logit_rows,
                        int chunk = 64);

}  // namespace hypic::model
