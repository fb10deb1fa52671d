#pragma once
// The T·S composition of segment summaries (MATH.md §2): S ← T·S + S(C|0) for every linear
// layer and value head at once. Implementation: kernels/host/compose.cpp.
#include "hypic/kernels/linear_family.hpp"

namespace hypic::kernels {

// One linear layer's segment summary as the composition reads it (pic::LinearSummary's
// arrays): T in its structure, and S(C|0).
struct TransitionRef {
  TStructure structure = TStructure::Scalar;
  int heads = 0, dk = 0, dv = 0;
  int rank = 0;               // LowRank only
  const float* t = nullptr;   // [H] | [H, dk] | [H, dk, dk] | LowRank diagonal d [H, dk]
  const float* x = nullptr;   // LowRank: [H, rank, dk], T = diag(d) − Xᵀ Y
  const float* y = nullptr;   // LowRank: [H, rank, dk]
  const float* s0 = nullptr;  // [H, dk, dv]
};

// For each i < n and head h: states[i][h] ← T_i,h · states[i][h] + S0_i,h, or with addition
// (the pic-addition ablation) states[i][h] + S0_i,h. states[i]: [H, dk, dv].
void compose_states(const TransitionRef* sums, float* const* states, int n, bool addition);

}  // namespace hypic::kernels
