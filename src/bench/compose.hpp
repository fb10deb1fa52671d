#pragma once
// `hypic bench compose`: what position-independent caching costs in one linear-attention layer
// of an architecture (Gated DeltaNet, KDA, MiniMax's lightning, Ring's RoPE'd lightning). The
// layer runs the way a forward pass runs it, once plainly and once capturing the transition T
// as compute_entry does; the summary's build cost is the extra time of the layer's recurrence
// part (its own timer) plus, with a junction window, S(R|0) = S_n − T·S_w (one application of
// T). S(C|0) itself is the final state the prefill computes anyway. Also: the time to apply one
// cached summary, and the bytes of a summary in each T structure.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "model/config.hpp"

namespace hypic::bench {

struct ComposeOptions {
  // The architecture's config (a preset or a config.json); only one linear layer of it is
  // built, with random weights.
  model::ModelConfig base;
  int layer = -1;    // which layer (a linear-attention one); -1: the first
  int tokens = 512;  // segment length
  int junction = 8;  // w: the window's tokens are not cached; S(R|0) needs T·S_w when w > 0
  // Size overrides of the linear layer (0 keeps the config's): hidden size, key / value heads,
  // head dim (key and value). Lightning kinds have one head count (value_heads).
  int hidden = 0;
  int key_heads = 0;
  int value_heads = 0;
  int head_dim = 0;
  int reps = 5;  // timed repetitions (median); applying a summary takes max(reps, 20)
  // Per-head forms of T (pic/entry_forms.hpp) at each tolerance: bytes and state error.
  std::vector<double> entry_tolerances = {0.001953125, 1e-2, 5e-2};
  // Gated DeltaNet decays drawn as the PIC tests' remembering models do (A = exp U(log 0.005,
  // log 0.1): a memory of tens to hundreds of tokens) instead of the initialiser's (A in
  // [1, 16]: every head forgets within a few tokens, so every T is below any tolerance).
  bool remembering = false;
};

// One tolerance's per-head forms of this layer's T (delta rules with a dense T only).
struct EntryFormsRow {
  double tolerance = 0;
  int64_t heads[6] = {};         // T: absent, scalar, diagonal, lowrank, dense, fp8
  int64_t s_fp8_heads = 0;       // heads whose S(C|0) is kept in fp8
  size_t dense_bytes_bf16 = 0;   // T + S (+ conv tail) of the layer, T dense (today)
  size_t chosen_bytes_bf16 = 0;  // the same in the chosen forms (+ the Tform / Sform arrays)
  double max_bound = 0;          // the largest head bound (entry_forms.hpp (2))
  // ‖T̂·S_in + S0 − (T·S_in + S0)‖_F / ‖T·S_in + S0‖_F, S_in the state the layer leaves after
  // another segment of as many random tokens (its state contribution: state_contribution).
  double state_error = 0;
  double state_contribution = 0;
};

// Bytes of T + S of one layer for the segment, in one T structure, per dtype.
struct SummaryBytes {
  std::string structure;  // "scalar", "diagonal", "dense", "lowrank"
  bool exact = false;     // this structure holds the layer kind's T exactly
  bool chosen = false;    // the structure a segment entry keeps for this segment
  std::vector<std::pair<std::string, size_t>> by_dtype;  // f32, bf16, f16
};

struct ComposeResult {
  kernels::BlasInfo blas;
  std::string arch;        // architecture name
  std::string layer_kind;  // "gated deltanet", "kda", "lightning", "lightning (RoPE)"
  int layer = 0;           // the layer's index in the model
  int hidden = 0, key_heads = 0, value_heads = 0, dk = 0, dv = 0;
  double layer_forward_s = 0;               // the whole layer, plain prefill
  double layer_forward_with_summary_s = 0;  // the same, capturing T (as compute_entry runs it)
  double recurrence_s = 0;                  // the layer's recurrence part, plain
  double recurrence_with_t_s = 0;           // the same, also producing T
  double s0_s = 0;                          // S(R|0) = S_n − T·S_w (0 without a junction window)
  double build_summary_s = 0;               // max(0, recurrence_with_t − recurrence) + s0
  double build_percent_of_layer = 0;
  double apply_s = 0;                     // S = T·S_in + S0, all heads, T as the entry keeps it
  std::string t_form;                     // the structure the entry keeps for this segment
  int lowrank_max_tokens = 0;             // delta rules: the WY form is kept up to this many tokens
  int64_t conv_values = 0;                // the conv tail an entry keeps (none: lightning layers)
  size_t entry_layer_bytes_bf16 = 0;      // T + S (+ conv tail) of this layer in a bf16 store
  double entry_bytes_per_token_bf16 = 0;  // the same per cached token (tokens − junction)
  std::vector<SummaryBytes> summary_bytes;  // scalar, diagonal, dense, lowrank (rank = cached)
  std::vector<EntryFormsRow> entry_forms;   // per tolerance (empty unless T is dense)
};

ComposeResult run_compose(const ComposeOptions& options);

// The share of the layer's forward that building a summary may cost (issue #13).
constexpr double kComposeTargetPercent = 7.0;

}  // namespace hypic::bench
