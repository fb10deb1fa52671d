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
//   fp8       T̂ = e4m3(T), row scales  ‖ΔT‖₂ ≤ ‖ΔT‖_F, measured on the encoded T
//   dense     T̂ = T                    0
// (before the SVD, τ ≤ ‖T‖_F stands in for σ₁: a head that passes with it needs no SVD).
// Absent T composes as S_out = S(C|0): the segment's own state, nothing carried through it.
//
// S(C|0) itself may be kept in fp8 too (one head at a time): it enters the composed state
// unchanged, so its error relative to ‖S0‖ is ε_S = ‖ΔS‖_F / ‖S0‖_F, measured on the encoded S.
// A head keeps the pair (form of T, form of S) of fewest stored elements with ε_T + ε_S ≤ the
// tolerance, so the head's composed state moves by at most the tolerance relative to ‖S0‖.
//
// fp8 is OCP e4m3 ("e4m3fn": sign, 4 exponent bits of bias 7, 3 mantissa bits, largest finite
// 448, no infinities) with one power-of-two scale 2^e per row, e chosen so that the row's
// largest magnitude maps into [120, 240): every code then has an exponent field below 15. The
// store keeps a row's e as a float (an integer, exact in every store dtype) and the codes two
// to a store element, as the 16 bits of a bf16 value (hi byte the first code): exact in bf16
// and f32 stores, and never a NaN or infinity since no code's exponent field is 15. f16 stores
// (whose rounding would change such bits) keep no fp8 forms.
#include <cstdint>
#include <string>
#include <vector>

#include "pic/linear_summary.hpp"

namespace hypic::pic {

enum class HeadForm { Absent = 0, Scalar = 1, Diagonal = 2, LowRank = 3, Dense = 4, Fp8 = 5 };
constexpr int kHeadForms = 6;
// "absent", "scalar", "diagonal", "lowrank", "dense", "fp8"
const char* head_form_name(HeadForm f);

// Floats one head's T takes in form f (LowRank of rank r: its diagonal d, then r rows of X
// and r rows of Y, with T̂ = diag(d) − XᵀY as LinearSummary's low-rank form; Fp8: the
// fp8_floats of a dk × dk matrix). The Tform row of an fp8 head holds (5, kFp8PackBf16).
int64_t head_form_floats(HeadForm f, int dk, int rank);

// --- fp8 e4m3 with per-row power-of-two scales (the plain reference; see above) ---
// Round to nearest, ties to even; magnitudes past 448 (infinity included) saturate to ±448,
// NaN becomes the NaN code 0x7F.
uint8_t e4m3_encode(double x);
float e4m3_decode(uint8_t code);
constexpr double kE4m3Unit = 1.0 / 16;  // unit roundoff: |x − e4m3(x)| ≤ 2⁻⁴·|x| (normal x)
constexpr double kFp8RowMax = 240;      // a row's largest magnitude maps below this
// The packing code of Tform/Sform rows: two codes per element as a bf16 value's bits.
constexpr int kFp8PackBf16 = 1;
// Whether a store of this dtype keeps the packed codes bit for bit (bf16, f32: yes; f16: no).
bool fp8_fits_store(DType store_dtype);
// Floats of an fp8 rows × cols matrix: rows exponents, then ⌈rows·cols / 2⌉ packed pairs.
int64_t fp8_floats(int rows, int cols);
// Encodes a row-major rows × cols matrix into out (fp8_floats of it). Every element then
// decodes to within max(2⁻⁴·|x|, 2⁻¹⁰·2^e) of x (2^e its row's scale; ≤ 2⁻⁴·240·2^e). Returns
// false (out unspecified) when the matrix holds a NaN or an infinity. A zero row has e = 0.
bool fp8_encode_matrix(const float* x, int rows, int cols, float* out);
// Decodes what fp8_encode_matrix wrote; returns "" or what is inconsistent (an exponent that
// is not an integer in range, a packed value that is not a pair of finite codes).
std::string fp8_decode_matrix(const float* packed, int rows, int cols, float* x);

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
  double bound = 0;  // bound on ‖ΔT·S_in‖_F / ‖S0‖_F: t_error / (1 − τ) (∞ when τ ≥ 1), + s_error
  bool s_fp8 = false;  // S(C|0) kept in fp8 (pack_t with fp8 only)
  double s_error = 0;  // ε_S = ‖ΔS‖_F / ‖S0‖_F of the kept S (0: S as the store keeps it)
};

// The chosen form of one head's T (dk × dk row-major) and its payload (head_form_floats of
// them). tolerance 0 keeps the dense T; a negative or non-finite tolerance throws. fp8: the
// fp8 form is a candidate (where it is smaller than low rank, tried before it).
HeadChoice choose_head_form(const float* t, int dk, double tolerance, std::vector<float>& payload,
                            bool fp8 = false);

// One linear layer's T in its chosen per-head forms, as the store keeps it:
// "linear/<l>/Tform" [H, 2] (form code, rank) and "linear/<l>/Tpack" (the payloads in head
// order; absent when every head is absent).
// With fp8 forms, S(C|0) too: "linear/<l>/Sform" [H, 4] (0 as stored or 1 fp8, the packing
// code, dk, dv) and "linear/<l>/Spack" (each head's dk·dv values, or its fp8_floats), set only
// when some head keeps an fp8 S.
struct PackedT {
  std::vector<float> forms;
  std::vector<float> packed;
  std::vector<HeadChoice> choices;
  std::vector<float> s_forms, s_packed;  // empty: S as the summary holds it
  bool all_dense() const;
  int64_t head_floats(int h, int dk) const;
};

// Chooses every head's form of a Dense summary's T; with fp8, also whether S(C|0) is kept in
// fp8 (each head the pair of fewest elements whose ε_T + ε_S ≤ tolerance).
PackedT pack_t(const LinearSummary& dense, double tolerance, bool fp8 = false);

// Composition in the stored forms, head by head, on the host: state [H, dk, dv] ← T̂·state +
// s0, each head's T̂ as Tform / Tpack keep it (absent: the state becomes s0; scalar and diagonal:
// element-wise; low rank: d ⊙ state − Xᵀ·(Y·state), two thin products; dense: one product;
// fp8: decoded into scratch, then one product). So a layer that mixes one dense head with cheap
// ones pays the dense product for that head only. Returns "" or what is inconsistent.
std::string compose_packed(const std::vector<float>& forms, const std::vector<float>& packed,
                           int heads, int dk, int dv, const float* s0, float* state);

// Sets sum.s from Sform / Spack (sum.heads, dk, dv given); "" or what is inconsistent.
std::string unpack_s(const std::vector<float>& forms, const std::vector<float>& packed,
                     LinearSummary& sum);
// Elements of S(C|0) one head keeps: dk·dv, or fp8_floats(dk, dv).
int64_t head_s_floats(bool fp8, int dk, int dv);

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
  int64_t s_fp8_heads = 0, s_fp8_floats = 0;  // heads whose S(C|0) is kept in fp8
  int64_t s_full_heads = 0, s_full_floats = 0;
};
void tally(const PackedT& p, int dk, FormTally& into, int dv = 0);  // dv 0: S not counted

// Parses --entry-tolerance: "auto" (the store dtype's unit roundoff) or a number ≥ 0; throws
// hypic::Error in one line otherwise.
double parse_entry_tolerance(const std::string& text, DType store_dtype);
// The default: half a unit in the last place of the store's element type (bf16 2⁻⁹, f16 2⁻¹²,
// f32 2⁻²⁵): no larger than the error storing S(C|0) itself already makes.
double default_entry_tolerance(DType store_dtype);

}  // namespace hypic::pic
