#pragma once
// `hypic bench compose`: what position-independent caching costs in a linear layer. For one
// Gated DeltaNet layer: the extra time to produce a segment's transition operator alongside
// the ordinary chunked prefill (S(C|0) is the zero-start final state the prefill computes
// anyway), as a share of the whole layer's forward on the same tokens; the time to apply one
// cached summary; and the bytes of a summary per T structure and dtype.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "model/config.hpp"

namespace hypic::bench {

struct ComposeOptions {
  // The layer's other settings (conv kernel, norm epsilon, …); the sizes below replace its
  // hidden size and linear-attention head counts and dims.
  model::ModelConfig base;
  int tokens = 512;  // segment length
  int hidden = 2048;
  int key_heads = 16;
  int value_heads = 32;
  int head_dim = 128;  // key and value head dim
  int reps = 5;        // timed repetitions (median); applying a summary takes max(reps, 20)
};

// Bytes of T + S of one layer for the segment, in one T structure, per dtype.
struct SummaryBytes {
  std::string structure;                                 // "scalar", "diagonal", "dense", …
  std::vector<std::pair<std::string, size_t>> by_dtype;  // f32, bf16, f16
};

struct ComposeResult {
  kernels::BlasInfo blas;
  double layer_forward_s = 0;      // proj, conv, delta rule, norm, out_proj
  double delta_rule_s = 0;         // the chunked delta rule alone
  double delta_rule_with_t_s = 0;  // the same, also producing the transition operator T
  double build_summary_s = 0;      // max(0, with T − without)
  double build_percent_of_layer = 0;
  double apply_s = 0;                       // S = T·S_in + S0 for all heads, dense T
  std::vector<SummaryBytes> summary_bytes;  // scalar, diagonal, dense, low-rank
};

ComposeResult run_compose(const ComposeOptions& options);

}  // namespace hypic::bench
