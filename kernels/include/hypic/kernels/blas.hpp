#pragma once
// Dense matrix products on the host through the BLAS chosen at configure time.
// Row-major throughout. Implementation: kernels/host/blas.cpp.
#include <cstdint>
#include <string>

namespace hypic::kernels {

// C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, row-major with leading dimensions.
// Runs as tiles of C (gemm_tiling) on the kernels' threads, the BLAS on one thread per tile.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

// y[m,n] = x[m,k] · W[n,k]ᵀ (the nn.Linear convention). With accumulate, y += instead of =.
// Runs as the tiles of linear_tiling.
void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate = false);
// Rows [first_row, m) of linear(x, w, y, m, n, k, accumulate), bit for bit: only the tiles of
// linear_tiling(m, n, k) that hold a row >= first_row run, each the same BLAS call as in the
// whole product (a BLAS may round a row differently in a call of other rows, so the rows are
// not multiplied alone). The kept tiles' rows before first_row are written too, from whatever
// x holds there. Nothing runs when first_row >= m.
void linear_from(int first_row, const float* x, const float* w, float* y, int m, int n, int k,
                 bool accumulate);

// y[m,n] = x[m,k] · W[n,k]ᵀ with W in bf16 (raw bits): the path bf16_gemm_path(m, n, k) picks.
// Same tiles as linear (linear_tiling), one thread per tile: bit-identical at every thread count.
void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                 bool accumulate = false);

// The host's ways of multiplying by bf16 weights:
//   Convert: each tile's weight rows widened to f32 in a per-thread buffer (256 rows at a
//            time), then one single-threaded sgemm: the f32 path's numbers, bf16's memory.
//   Dot3:    AVX-512 BF16 micro-kernel (vdpbf16ps) on the bf16 weights and the activations
//            split exactly into three bf16 terms (hi + mid + lo = the f32 value): every product
//            exact, f32 accumulation, so only the summation order differs from sgemm; half the
//            weight bytes read.
//   Dot2:    two terms (~16 mantissa bits, ~2e-6 relative per product): measured, not chosen
//            (the golden logits moved by up to 1.5e-4 with it, over the 1e-4 tolerance).
//   Dot1:    the activations rounded once to bf16 (8 bits, ~1.5e-3 relative): the fastest,
//            too coarse for the golden tolerance; bench and tests only.
enum class Bf16Gemm { Auto, Convert, Dot3, Dot2, Dot1 };
const char* bf16_gemm_name(Bf16Gemm p);  // "auto", "convert", "dot3", "dot2", "dot1"
// Whether the Dot paths exist: compiled in (compiler supports AVX-512 BF16) and the CPU has it.
bool bf16_dot_available();
// What Auto runs for a shape: Dot3 for products of few rows (memory-bound: half the weight
// bytes wins) when available, Convert otherwise (bench blas measures every path per shape).
// The environment variable HYPIC_BF16_GEMM=convert|dot3|dot2|dot1 forces one path (for
// measurements).
Bf16Gemm bf16_gemm_path(int m, int n, int k);
// One named path (Auto resolves as above); throws hypic::Error for a Dot path that is absent.
void linear_bf16_with(Bf16Gemm path, const float* x, const uint16_t* w, float* y, int m, int n,
                      int k, bool accumulate = false);
// Rows [first_row, m) of linear_bf16_with(path, ...) as linear_from: the path the whole product
// takes (Auto resolved with m), its tiles that hold a row >= first_row.
void linear_bf16_from(Bf16Gemm path, int first_row, const float* x, const uint16_t* w, float* y,
                      int m, int n, int k, bool accumulate);

// How gemm splits C: tiles of mb × nb (the last ones smaller), fixed by the shape alone so that
// each element is summed in the same order at every thread count. Small products are one tile.
struct GemmTiling {
  int mb = 0, nb = 0;  // tile rows, tile columns
  int tm = 1, tn = 1;  // tiles down, tiles across
  int64_t tiles() const { return int64_t(tm) * tn; }
};
GemmTiling gemm_tiling(int m, int n, int k);
// How linear splits y = x·Wᵀ: as gemm_tiling, and a product of too few rows to split (a pic
// query's junction windows and question, a decode step) splits its columns down to 128 while a
// tile keeps at least 4 M multiply-adds, counting at least 64 rows: with few rows a tile's time
// is mostly reading and packing its weight rows. gemm keeps gemm_tiling, since the kernels call
// it for a head's products inside their own parallel items, where tiles would run one by one.
GemmTiling linear_tiling(int m, int n, int k);

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21", "BLIS", ...
  std::string kernel;   // the compute kernel it runs: "SkylakeX", "Haswell", ...
  std::string note;     // e.g. "core type forced from Prescott via OPENBLAS_CORETYPE"
  int threads = 1;      // hypic's threads (kernels::threads()); the BLAS runs one per tile
};
BlasInfo blas_info();
// One call of the BLAS on its own `blas_threads` threads, not tiled: what hypic's tiles cost
// and buy is measured against it (bench blas). Not bit-identical across thread counts.
void gemm_one_blas_call(int blas_threads, bool trans_a, bool trans_b, int m, int n, int k,
                        float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                        float* c, int ldc);
// Keeps the BLAS library on one thread (hypic runs the tiles in parallel); threads.cpp calls it.
void blas_use_one_thread();

// If the BLAS mis-detects this CPU (OpenBLAS 0.3.21 reports "Prescott" on newer Xeons and
// runs 5x slower), returns the OPENBLAS_CORETYPE value to use, else "". The app re-executes
// itself with that variable set before any thread or MPI initialisation.
std::string blas_recommended_coretype();

}  // namespace hypic::kernels
