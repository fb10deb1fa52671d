// AVX-512 BF16 dot-product micro-kernel (vdpbf16ps). The instruction set is enabled for the
// functions of this file only (target pragma after every include), and they are called only
// when the CPU reports avx512_bf16, so the rest of hypic stays runnable on any x86-64.
#include "bf16_dot.hpp"

#if defined(HYPIC_HAVE_AVX512BF16)
#include <immintrin.h>
#endif

#include "hypic/error.hpp"

namespace hypic::kernels::host {

#if defined(HYPIC_HAVE_AVX512BF16)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

namespace {

inline __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// An MR × NR block of y: MR activation rows against NR weight rows, every k step 32 values.
// Weight rows are not padded: their last step loads under a mask (zeros beyond k). TERMS is a
// template argument so that every loop inside the k loop unrolls and the MR·NR accumulators stay
// in registers (a run-time count made GCC spill them on every step: 3x slower).
template <int MR, int NR, int TERMS>
void block(const uint16_t* xb, size_t term_stride, int kp, const uint16_t* w, int ldw, int k,
           float* y, int ldy, bool accumulate) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  // One k step of 32 values: weights unmasked in the main loop, under a mask in the tail.
  auto step = [&](int p, const __mmask32 mask) __attribute__((always_inline)) {
    __m512bh b[NR];
    for (int j = 0; j < NR; ++j)
      b[j] = as_bh(_mm512_maskz_loadu_epi16(mask, w + static_cast<size_t>(j) * ldw + p));
    for (int t = 0; t < TERMS; ++t) {
      const uint16_t* xt = xb + t * term_stride + p;
      for (int i = 0; i < MR; ++i) {
        const __m512bh a = as_bh(_mm512_loadu_si512(xt + static_cast<size_t>(i) * kp));
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, b[j]);
      }
    }
  };
  const int kfull = k & ~31;
  for (int p = 0; p < kfull; p += 32) step(p, static_cast<__mmask32>(~0u));
  if (kfull < k) step(kfull, static_cast<__mmask32>((uint64_t(1) << (k - kfull)) - 1));
  // Horizontal sums in a fixed order (not _mm512_reduce_add_ps: GCC 12's header warns).
  alignas(64) float lanes[16];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      _mm512_store_ps(lanes, acc[i][j]);
      float s = 0.0f;
      for (int l = 0; l < 16; ++l) s += lanes[l];
      float& out = y[static_cast<size_t>(i) * ldy + j];
      out = accumulate ? out + s : s;
    }
}

template <int MR, int TERMS>
void row_block(int nr, const uint16_t* xb, size_t ts, int kp, const uint16_t* w, int ldw, int k,
               float* y, int ldy, bool acc) {
  switch (nr) {
    case 4:
      return block<MR, 4, TERMS>(xb, ts, kp, w, ldw, k, y, ldy, acc);
    case 3:
      return block<MR, 3, TERMS>(xb, ts, kp, w, ldw, k, y, ldy, acc);
    case 2:
      return block<MR, 2, TERMS>(xb, ts, kp, w, ldw, k, y, ldy, acc);
    default:
      return block<MR, 1, TERMS>(xb, ts, kp, w, ldw, k, y, ldy, acc);
  }
}

template <int TERMS>
void tile(const uint16_t* xb, size_t term_stride, int kp, int rows, const uint16_t* w, int ldw,
          int cols, int k, float* y, int ldy, bool accumulate) {
  constexpr int kMr = 4, kNr = 4, kPanelRows = 32;
  // Row panels of 32: the panel's activations stay in L1/L2 while the weight rows stream by
  // once per panel (once in all for decode-sized products).
  for (int r0 = 0; r0 < rows; r0 += kPanelRows) {
    const int r1 = rows < r0 + kPanelRows ? rows : r0 + kPanelRows;
    for (int j = 0; j < cols; j += kNr) {
      const int nr = cols - j < kNr ? cols - j : kNr;
      for (int i = r0; i < r1; i += kMr) {
        const int mr = r1 - i < kMr ? r1 - i : kMr;
        const uint16_t* xi = xb + static_cast<size_t>(i) * kp;
        const uint16_t* wj = w + static_cast<size_t>(j) * ldw;
        float* yij = y + static_cast<size_t>(i) * ldy + j;
        switch (mr) {
          case 4:
            row_block<4, TERMS>(nr, xi, term_stride, kp, wj, ldw, k, yij, ldy, accumulate);
            break;
          case 3:
            row_block<3, TERMS>(nr, xi, term_stride, kp, wj, ldw, k, yij, ldy, accumulate);
            break;
          case 2:
            row_block<2, TERMS>(nr, xi, term_stride, kp, wj, ldw, k, yij, ldy, accumulate);
            break;
          default:
            row_block<1, TERMS>(nr, xi, term_stride, kp, wj, ldw, k, yij, ldy, accumulate);
        }
      }
    }
  }
}

}  // namespace

bool bf16_dot_compiled() {
  return true;
}

void bf16_dot_tile(const uint16_t* xb, size_t term_stride, int kp, int terms, int rows,
                   const uint16_t* w, int ldw, int cols, int k, float* y, int ldy,
                   bool accumulate) {
  if (terms == 3)
    tile<3>(xb, term_stride, kp, rows, w, ldw, cols, k, y, ldy, accumulate);
  else if (terms == 2)
    tile<2>(xb, term_stride, kp, rows, w, ldw, cols, k, y, ldy, accumulate);
  else
    tile<1>(xb, term_stride, kp, rows, w, ldw, cols, k, y, ldy, accumulate);
}

#pragma GCC pop_options

#else  // no compiler support: the Dot paths report themselves absent

bool bf16_dot_compiled() {
  return false;
}

void bf16_dot_tile(const uint16_t*, size_t, int, int, int, const uint16_t*, int, int, int, float*,
                   int, bool) {
  throw Error("internal: the AVX-512 BF16 kernel was not compiled in");
}

#endif

}  // namespace hypic::kernels::host
