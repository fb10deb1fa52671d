#pragma once
// The linear-attention family as one recurrence (MATH.md §1-§2). Per value head the state
// is S ∈ R^{dk×dv} (key-major) and every member updates
//   S_t = A_t · S_{t−1} + B_t,   o_t = S_tᵀ q_t,
// where A_t is a decay (none, scalar, or per key channel) optionally followed by a delta-rule
// erase (I − β_t k_t k_tᵀ), and B_t = β_t k_t v_tᵀ (β = 1 without erase):
//   member            decay      erase   T_C structure
//   linear attention  none       no      scalar (identity)
//   RetNet, Mamba2,   scalar     no      scalar per head
//   lightning
//   GLA               diagonal   no      diagonal, dk per head
//   DeltaNet          none       yes     dense dk×dk
//   Gated DeltaNet    scalar     yes     dense dk×dk
//   KDA               diagonal   yes     dense dk×dk   (A_t = (I − βkkᵀ)·diag(e^{g_t}))
// Inputs arrive already prepared by the layer (normalised, scaled, rotated; Mamba2 passes
// q = C, k = B, v = dt·x). Value head h reads key head h / (Hv / Hk).
// Implementation: kernels/host/linear_family.cpp; derivations: docs/linear-family.md.
#include <cstdint>

namespace hypic::kernels {

enum class Decay { None, Scalar, Diagonal };
enum class TStructure { Scalar, Diagonal, Dense, LowRank };

struct FamilySpec {
  Decay decay = Decay::None;
  bool delta = false;  // delta-rule erase after the decay
};

// Lightning: MiniMax's lightning attention, a constant scalar decay per head (e^{−slope_h}).
enum class Member { LinearAttention, RetNet, Mamba2, GLA, DeltaNet, GatedDeltaNet, KDA, Lightning };
FamilySpec member_spec(Member m);
const char* member_name(Member m);

// The structure T_C takes for a member (natural structure; LowRank is an alternative
// storage of Dense, see family_summary_lowrank).
TStructure natural_structure(const FamilySpec& s);
// Floats per head of T in a structure (LowRank: rank r -> dk + 2·r·dk).
int64_t transition_floats_per_head(TStructure st, int dk, int rank = 0);

struct FamilyDims {
  int T = 0;   // tokens
  int Hk = 0;  // key heads
  int Hv = 0;  // value heads (a multiple of Hk)
  int dk = 0;
  int dv = 0;
};

struct FamilyInputs {
  const float* q = nullptr;  // [T, Hk, dk]
  const float* k = nullptr;  // [T, Hk, dk]
  const float* v = nullptr;  // [T, Hv, dv]
  const float* g = nullptr;  // log decay (≤ 0): [T, Hv] scalar, [T, Hv, dk] diagonal; null: none
  const float* beta = nullptr;  // [T, Hv] for delta members, else ignored
};

// Token-by-token oracle (double accumulation inside). state: [Hv, dk, dv] in/out; out
// [T, Hv, dv] may be null.
void family_recurrent(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                      float* state, float* out);

// The same token loop in f32, two passes over S per token: the fast path for decode (T = 1 or
// a few tokens), where chunking has nothing to amortise.
void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                          float* state, float* out);

// Chunked production path: chunk tokens at a time with matrix products (BLAS) inside, heads in
// parallel. state: [Hv, dk, dv] in/out; out [T, Hv, dv] may be null. transition, if non-null,
// receives T = A_T ⋯ A_1 in the member's natural structure: [Hv] scalar, [Hv, dk] diagonal or
// [Hv, dk, dk] dense (row-major, T acting on the key index of S).
void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                    float* out, float* transition = nullptr, int chunk = 64);

// Low-rank (WY) transition of a delta member over the whole segment in one chunk:
//   T = diag(tdiag) − Xᵀ Y,   X, Y: [Hv, T, dk] (rank = tokens), tdiag: [Hv, dk].
// Also produces out and the final state like family_chunked. Meant for short segments
// (T ≤ dk), where it is smaller than the dense matrix.
void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* tdiag, float* x, float* y);

// Rotary pairing for re-rotation (MATH.md §4): Half pairs (i, i + rot/2) (neox rotate_half),
// Interleaved pairs (2i, 2i + 1) (RetNet's theta shift). Angle of pair i at position p:
// p · theta^(−2i/rot).
struct Rotary {
  int rotary_dim = 0;  // leading dims that rotate (even)
  float theta = 10000.0f;
  bool interleaved = false;
};

// Rotates n vectors of length dk (row stride ld) as keys moved by pos positions: x ← R_pos x.
void rotary_rotate(const Rotary& r, float* x, int n, int ld, int dk, int64_t pos);
// Same for the columns of a [dk, cols] row-major matrix (each column is a key vector).
void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols, int64_t pos);
// dst[h] = R_pos · src[h] for the heads of [heads, dk, dv] states (columns rotated as above);
// dst may equal src.
void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                     int64_t pos);

}  // namespace hypic::kernels
