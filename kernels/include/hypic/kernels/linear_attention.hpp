#pragma once
// Gated DeltaNet recurrence (MATH.md §1): per value head, state S ∈ R^{dk×dv},
//   S_t = e^{g_t} (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,   o_t = S_tᵀ q_t.
// Value head h reads key head h / (Hv / Hk). Implementation: kernels/host/.
namespace hypic::kernels {

struct DeltaRuleDims {
  int T = 0;   // tokens
  int Hk = 0;  // key heads
  int Hv = 0;  // value heads (a multiple of Hk)
  int dk = 0;  // key head dim
  int dv = 0;  // value head dim
};

// q, k : [T, Hk, dk]  already L2-normalised, q already scaled by dk^-1/2
// v    : [T, Hv, dv]
// g    : [T, Hv]      log decay (<= 0)
// beta : [T, Hv]
// state: [Hv, dk, dv] read as the incoming state and overwritten by the final state
// out  : [T, Hv, dv]
// Token-by-token loop in f32: the decode path (T = 1). The double-accumulating oracle the
// tests use is family_recurrent (linear_family.hpp).
void gated_delta_rule_recurrent(const DeltaRuleDims& d, const float* q, const float* k,
                                const float* v, const float* g, const float* beta, float* state,
                                float* out);

// Chunked production path (WY/UT form, chunk tokens at a time, matrix products inside).
// If transition is non-null it receives T = A_T ⋯ A_1 per value head, [Hv, dk, dk], so a
// segment summary costs one pass (MATH.md §2). Entries below 1e-30 are flushed to zero
// (subnormals slow every later product; docs/linear-family.md §2). Other family members and
// the segment-summary operations: linear_family.hpp, src/pic/linear_summary.hpp.
void gated_delta_rule_chunked(const DeltaRuleDims& d, const float* q, const float* k,
                              const float* v, const float* g, const float* beta, float* state,
                              float* out, float* transition = nullptr, int chunk = 64);

}  // namespace hypic::kernels
