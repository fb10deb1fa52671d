#pragma once
// Dense matrix products on the host through the BLAS chosen at configure time.
// Row-major throughout. Implementation: kernels/host/blas.cpp.
#include <string>

namespace hypic::kernels {

// C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, row-major with leading dimensions.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);

// y[m,n] = x[m,k] · W[n,k]ᵀ (the nn.Linear convention). With accumulate, y += instead of =.
void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate = false);

struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21", "BLIS", ...
  std::string kernel;   // the compute kernel it runs: "SkylakeX", "Haswell", ...
  std::string note;     // e.g. "core type forced from Prescott via OPENBLAS_CORETYPE"
  int threads = 1;
};
BlasInfo blas_info();
void set_blas_threads(int n);

// If the BLAS mis-detects this CPU (OpenBLAS 0.3.21 reports "Prescott" on newer Xeons and
// runs 5x slower), returns the OPENBLAS_CORETYPE value to use, else "". The app re-executes
// itself with that variable set before any thread or MPI initialisation.
std::string blas_recommended_coretype();

}  // namespace hypic::kernels
