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
void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate = false);

// How gemm splits C: tiles of mb × nb (the last ones smaller), fixed by the shape alone so that
// each element is summed in the same order at every thread count. Small products are one tile.
struct GemmTiling {
  int mb = 0, nb = 0;  // tile rows, tile columns
  int tm = 1, tn = 1;  // tiles down, tiles across
  int64_t tiles() const { return int64_t(tm) * tn; }
};
GemmTiling gemm_tiling(int m, int n, int k);

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
