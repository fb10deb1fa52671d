#pragma once
// Segment summaries of linear-attention layers (MATH.md §2): for a segment C, the
// transition T_C = A_n ⋯ A_1 and the zero-start state S(C|0), so that under any incoming
// state S_after = T_C · S_in + S(C|0). Derivations and measurements: docs/linear-family.md.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/tensor.hpp"

namespace hypic::pic {

using kernels::FamilyDims;
using kernels::FamilyInputs;
using kernels::FamilySpec;
using kernels::TStructure;

const char* structure_name(TStructure s);

// One linear layer's summary of one segment, all value heads.
struct LinearSummary {
  TStructure structure = TStructure::Scalar;
  int heads = 0;
  int dk = 0;
  int dv = 0;
  int rank = 0;        // LowRank: number of rank-one terms (the segment's tokens)
  int64_t tokens = 0;  // segment length
  // Scalar [H] | Diagonal [H, dk] | Dense [H, dk, dk] (row-major, acts on the key index)
  // | LowRank: the diagonal part d [H, dk] of T = diag(d) − Xᵀ Y.
  std::vector<float> t;
  std::vector<float> x, y;  // LowRank only: [H, rank, dk] each
  std::vector<float> s;     // S(C|0): [H, dk, dv]

  size_t bytes(DType dt) const;  // T and S as they would be stored
};

// Which form of T a summary keeps. Natural: the member's structure (Dense for delta rules).
// LowRank: the WY form (delta rules only). Auto: LowRank for delta rules on segments of at
// most lowrank_max_tokens(dk) tokens, Natural otherwise (the measured decision).
enum class TForm { Natural, LowRank, Auto };
int lowrank_max_tokens(int dk);

// Bytes of one summary: T in structure st (rank for LowRank) plus S, per layer.
size_t summary_bytes(TStructure st, int heads, int dk, int dv, int rank, DType dt);

// Every operation below runs its ops on the backend `be`; the summaries' arrays are host
// vectors today, so `be` must compute on the host (host_backend()) until they move to Tensors.

// Runs the layer's chunked kernel over the segment from a zero state; out [T, Hv, dv]
// (nullable) receives the layer's ordinary outputs, so the summary comes with the prefill.
LinearSummary summarize(const kernels::Backend& be, const FamilySpec& spec, const FamilyDims& d,
                        const FamilyInputs& in, float* out = nullptr, TForm form = TForm::Auto,
                        int chunk = 64);

// state [H, dk, dv] ← T · state + S(C|0).
void apply(const kernels::Backend& be, const LinearSummary& sum, float* state);
// Baseline without T (pic-addition mode): state ← state + S(C|0).
void apply_addition(const kernels::Backend& be, const LinearSummary& sum, float* state);
// How much the incoming state contributes to the composed one at a segment boundary
// (MATH.md §2): ‖T·S_in‖ / ‖T·S_in + S(C|0)‖, Frobenius norms over all heads, accumulated in
// double; 0 when the composed state is zero. `state_in` [H, dk, dv] is not changed. T·S_in
// is taken as the composed state minus S(C|0), so the ratio is within ~1e-7 of exact.
double state_contribution(const kernels::Backend& be, const LinearSummary& sum,
                          const float* state_in);
// The summary of `first` followed by `second`: T = T2·T1, S = T2·S1 + S2.
LinearSummary chain(const kernels::Backend& be, const LinearSummary& first,
                    const LinearSummary& second);
// The same summary with T materialised in `to` (Scalar → Diagonal → Dense, LowRank → Dense).
LinearSummary convert(const kernels::Backend& be, const LinearSummary& sum, TStructure to);

// Batched over layers and heads in one op: states[l] ← T_l · states[l] + S_l.
void apply_layers(const kernels::Backend& be, const std::vector<const LinearSummary*>& sums,
                  const std::vector<float*>& states, bool addition = false);

// Moves a summary computed with keys rotated at offset 0 to offset p (MATH.md §4):
// S ← R_p S, and T ← R_p T R_pᵀ (unchanged for Scalar). Diagonal T must be equal on each
// rotary pair; a LowRank T with a non-uniform diagonal part is made Dense first.
void rerotate(const kernels::Backend& be, LinearSummary& sum, const kernels::Rotary& r, int64_t p);

}  // namespace hypic::pic
