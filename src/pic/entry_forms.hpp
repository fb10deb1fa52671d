#pragma once
// The smallest faithful form of a segment entry's transition T, chosen per head by a bound
// (issue #47; docs/entry-forms.md, MATH.md §2). A linear layer's entry composes as
// S_out = T·S_in + S(C|0); storing an approximation T̂ = T − ΔT instead changes the composed
// state by ΔT·S_in, and
//
//   ‖ΔT·S_in‖_F ≤ ‖ΔT‖₂ · ‖S_in‖_F.                                                    (1)
//
// ‖S_in‖ is not known when the entry is made, so it is bounded from the entry itself: S_in is
// the state the earlier segments leave, S_in = S0₁ + T₁·S0₂ + T₁T₂·S0₃ + …, and if each of them
// has ‖S0_k‖_F ≤ ‖S0‖_F and ‖T_k‖₂ ≤ τ (τ this segment's bound on ‖T‖₂, τ < 1), then
//
//   ‖S_in‖_F ≤ ‖S0‖_F · (1 + τ + τ² + …) = ‖S0‖_F / (1 − τ).                           (2)
//
// So ε = ‖ΔT·S_in‖_F / ‖S0‖_F ≤ ‖ΔT‖₂ / (1 − τ), and a head keeps the smallest form whose ε
// stays ≤ the tolerance. A head with τ ≥ 1 (no decay) keeps only exact forms. With
// d = diag(T), R = T − diag(d) and σ₁ ≥ σ₂ ≥ … the singular values of T (one SVD):
//   absent    T̂ = 0                    ‖ΔT‖₂ = σ₁ = τ
//   scalar    T̂ = t·I, t midrange(d)  ‖ΔT‖₂ ≤ max|d − t| + ‖R‖_F
//   diagonal  T̂ = diag(d)              ‖ΔT‖₂ ≤ ‖R‖_F
//   low rank  T̂ = T_r (truncated SVD)  ‖ΔT‖₂ = σ_{r+1}  (r ≤ dk/2 − 1)
//   dense     T̂ = T                    0
// (before the SVD, τ ≤ ‖T‖_F stands in for σ₁: a head that passes with it needs no SVD).
// Absent T composes as S_out = S(C|0): the segment's own state, nothing carried through it.
#include <cstdint>
#include <string>
#include <vector>

#include "pic/linear_summary.hpp"

namespace hypic::pic {

enum class HeadForm { Absent = 0, Scalar = 1, Diagonal = 2, LowRank = 3, Dense = 4 };
constexpr int kHeadForms = 5;
const char* head_form_name(HeadForm f);  // "absent", "scalar", "diagonal", "lowrank", "dense"

// Floats one head's T takes in form f (LowRank of rank r: its diagonal d, then r rows of X
// and r rows of Y, with T̂ = diag(d) − XᵀY as LinearSummary's low-rank form).
int64_t head_form_floats(HeadForm f, int dk, int rank);

// a = U · diag(sigma) · Vᵀ for a row-major n × n matrix: sigma descending, u row-major with
// the left singular vectors as columns, vt row-major with the right ones as rows. LAPACK's
// sgesdd where the BLAS brings LAPACK (OpenBLAS), svd_jacobi otherwise.
void svd(int n, const float* a, std::vector<float>& sigma, std::vector<float>& u,
         std::vector<float>& vt);
// One-sided Jacobi (Hestenes) in double: the portable path, public for its test.
void svd_jacobi(int n, const float* a, std::vector<float>& sigma, std::vector<float>& u,
                std::vector<float>& vt);
bool svd_uses_lapack();

struct HeadChoice {
  HeadForm form = HeadForm::Dense;
  int rank = 0;        // LowRank only
  double t_norm = 0;   // τ, the bound on ‖T‖₂
  double t_error = 0;  // bound on ‖ΔT‖₂ of the chosen form
  double bound = 0;  // bound on ‖ΔT·S_in‖_F / ‖S0‖_F: t_error / (1 − τ) (∞ when τ ≥ 1)
};

// The chosen form of one head's T (dk × dk row-major) and its payload (head_form_floats of
// them). tolerance 0 keeps the dense T; a negative or non-finite tolerance throws.
HeadChoice choose_head_form(const float* t, int dk, double tolerance, std::vector<float>& payload);

// One linear layer's T in its chosen per-head forms, as the store keeps it:
// "linear/<l>/Tform" [H, 2] (form code, rank) and "linear/<l>/Tpack" (the payloads in head
// order; absent when every head is absent).
struct PackedT {
  std::vector<float> forms;
  std::vector<float> packed;
  std::vector<HeadChoice> choices;
  bool all_dense() const;
  int64_t head_floats(int h, int dk) const;
};

// Chooses every head's form of a Dense summary's T.
PackedT pack_t(const LinearSummary& dense, double tolerance);

// Sets sum.structure, rank, t, x, y from a packed T (sum.heads and sum.dk given): Dense when
// any head is dense (the others materialised), else LowRank at the largest rank (the rows of
// lower-rank heads zero), else Diagonal, else Scalar (absent heads: 0). Returns "" or what is
// inconsistent (a form code or rank out of range, a payload of the wrong length).
std::string unpack_t(const std::vector<float>& forms, const std::vector<float>& packed,
                     LinearSummary& sum);

// The entry's bytes of T by form (f32 counts; times the store's element size for its bytes).
struct FormTally {
  int64_t heads[kHeadForms] = {};
  int64_t floats[kHeadForms] = {};
};
void tally(const PackedT& p, int dk, FormTally& into);

// Parses --entry-tolerance: "auto" (the store dtype's unit roundoff) or a number ≥ 0; throws
// hypic::Error in one line otherwise.
double parse_entry_tolerance(const std::string& text, DType store_dtype);
// The default: half a unit in the last place of the store's element type (bf16 2⁻⁹, f16 2⁻¹²,
// f32 2⁻²⁵): no larger than the error storing S(C|0) itself already makes.
double default_entry_tolerance(DType store_dtype);

}  // namespace hypic::pic
