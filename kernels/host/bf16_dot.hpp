#pragma once
// The AVX-512 BF16 micro-kernel behind kernels::linear_bf16's Dot paths (bf16_dot.cpp is the
// only file compiled for that instruction set; callers check bf16_dot_compiled() and the CPU).
#include <cstddef>
#include <cstdint>

namespace hypic::kernels::host {

// Whether bf16_dot.cpp was built with the AVX-512 BF16 kernel (compiler support).
bool bf16_dot_compiled();

// y[i, j] (+)= Σ_t Σ_p xb[t][i][p] · w[j][p] for i < rows, j < cols: xb holds `terms` (1-3) bf16
// copies of the activation rows (term t at xb + t·term_stride, row i at + i·kp, zero-padded to
// kp, a multiple of 32, ≥ k); w holds `cols` bf16 rows of k values (ldw apart). Each y element
// is one fixed sequence of vdpbf16ps steps and one horizontal sum: no dependence on threads.
void bf16_dot_tile(const uint16_t* xb, size_t term_stride, int kp, int terms, int rows,
                   const uint16_t* w, int ldw, int cols, int k, float* y, int ldy, bool accumulate);

}  // namespace hypic::kernels::host
