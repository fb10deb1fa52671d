// Host BLAS: the CBLAS entry points of the library chosen at configure time, called on one
// thread per tile; the tiles run on the kernels' threads (threads.hpp).
#include "hypic/kernels/blas.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bf16_dot.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/threads.hpp"
#include "parallel.hpp"

#if defined(HYPIC_BLAS_BLIS)
#include <blis.h>
#include <cblas.h>
#else
#include <cblas.h>
#endif

namespace hypic::kernels {

namespace {
// Both tilings: a tile is not split below kMinTileWork multiply-adds, a product has at most
// kTargetTiles tiles, and a halved tile side is rounded up to a multiple of kRound.
constexpr int64_t kMinTileWork = int64_t(1) << 22;
constexpr int kTargetTiles = 32, kRound = 16;
int halve(int x) {
  return ((x + 1) / 2 + kRound - 1) / kRound * kRound;
}
}  // namespace

GemmTiling gemm_tiling(int m, int n, int k) {
  // Each tile repacks the operand it shares with its neighbours, so tiles are few and large:
  // rows (tokens) are split first, down to kMinRows, then columns down to kMinCols, until
  // there are kTargetTiles. Measured on one core (Cooperlake kernel, CPU time): 8-32 tiles of
  // 1024-token products run at 85-94 % of one whole call (README).
  constexpr int kMinRows = 256, kMinCols = 512;
  GemmTiling t{m, n, 1, 1};
  auto work = [k](int64_t rows, int64_t cols) { return rows * cols * std::max(1, k); };
  while (t.tiles() < kTargetTiles) {
    if (t.mb >= 2 * kMinRows && work(halve(t.mb), t.nb) >= kMinTileWork)
      t.mb = halve(t.mb);
    else if (t.nb >= 2 * kMinCols && work(t.mb, halve(t.nb)) >= kMinTileWork)
      t.nb = halve(t.nb);
    else
      break;
    t.tm = (m + t.mb - 1) / t.mb;
    t.tn = (n + t.nb - 1) / t.nb;
  }
  return t;
}

GemmTiling linear_tiling(int m, int n, int k) {
  GemmTiling t = gemm_tiling(m, n, k);
  if (t.tm > 1) return t;
  // Few rows: column tiles of at least kMinCols, each worth kMinTileWork counting at least
  // kMinRows rows (a tile of few rows costs about what its weight rows cost to pack).
  // `hypic bench blas` measures these products against one BLAS call (docs/threads.md).
  constexpr int kMinCols = 128, kMinRows = 64;
  const int64_t rows = std::max(m, kMinRows);
  while (t.tiles() < kTargetTiles && t.nb >= 2 * kMinCols &&
         rows * halve(t.nb) * std::max(1, k) >= kMinTileWork) {
    t.nb = halve(t.nb);
    t.tn = (n + t.nb - 1) / t.nb;
  }
  return t;
}

namespace {
// The tiles of t before the first one that holds row `first_row` (whole rows of tiles).
int64_t tiles_before(const GemmTiling& t, int first_row) {
  return first_row <= 0 ? 0 : int64_t(first_row / t.mb) * t.tn;
}

// C as the given tiles, each one single-threaded BLAS call over all of k: every element of C
// is summed in the same order whichever thread runs its tile and however many there are. The
// tiles that hold no row >= first_row are skipped (each kept tile is the same call as ever).
void tiled_gemm(const GemmTiling& t, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
                int first_row = 0) {
  if (m == 0 || n == 0 || first_row >= m) return;
  threads();  // first use pins the BLAS to one thread
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const int64_t skip = tiles_before(t, first_row);
  host::parallel_for(t.tiles() - skip, int64_t(t.mb) * t.nb * std::max(1, k), [&](int64_t i) {
    i += skip;
    const int r0 = static_cast<int>(i / t.tn) * t.mb, c0 = static_cast<int>(i % t.tn) * t.nb;
    const int rows = std::min(t.mb, m - r0), cols = std::min(t.nb, n - c0);
    const float* at = trans_a ? a + r0 : a + static_cast<size_t>(r0) * lda;
    const float* bt = trans_b ? b + static_cast<size_t>(c0) * ldb : b + c0;
    cblas_sgemm(CblasRowMajor, ta, tb, rows, cols, k, alpha, at, lda, bt, ldb, beta,
                c + static_cast<size_t>(r0) * ldc + c0, ldc);
  });
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  tiled_gemm(gemm_tiling(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate) {
  tiled_gemm(linear_tiling(m, n, k), false, true, m, n, k, 1.0f, x, k, w, k,
             accumulate ? 1.0f : 0.0f, y, n);
}

void linear_from(int first_row, const float* x, const float* w, float* y, int m, int n, int k,
                 bool accumulate) {
  tiled_gemm(linear_tiling(m, n, k), false, true, m, n, k, 1.0f, x, k, w, k,
             accumulate ? 1.0f : 0.0f, y, n, first_row);
}

namespace {

uint16_t round_to_bf16(float f) {  // nearest, ties to even (activations are finite)
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float widen_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Products of at most this many rows run Dot3 under Auto: there the weights' bytes decide the
// time and bf16 reads half of them. `hypic bench blas` here (2 threads, k = 2048): dot3 beat
// convert 19 to 0.8-6 GFLOP/s at 1 row, tied at 8 rows, lost at 16 (6.3 vs 9.8).
constexpr int kDotMaxRows = 4;

Bf16Gemm forced_path() {
  static const Bf16Gemm forced = [] {
    const char* v = std::getenv("HYPIC_BF16_GEMM");
    if (v == nullptr) return Bf16Gemm::Auto;
    const std::string s(v);
    if (s == "convert") return Bf16Gemm::Convert;
    if (s == "dot3") return Bf16Gemm::Dot3;
    if (s == "dot2") return Bf16Gemm::Dot2;
    if (s == "dot1") return Bf16Gemm::Dot1;
    return Bf16Gemm::Auto;
  }();
  return forced;
}

}  // namespace

const char* bf16_gemm_name(Bf16Gemm p) {
  switch (p) {
    case Bf16Gemm::Convert:
      return "convert";
    case Bf16Gemm::Dot3:
      return "dot3";
    case Bf16Gemm::Dot2:
      return "dot2";
    case Bf16Gemm::Dot1:
      return "dot1";
    default:
      return "auto";
  }
}

bool bf16_dot_available() {
#if defined(__x86_64__)
  static const bool available = [] {
    __builtin_cpu_init();
    return host::bf16_dot_compiled() && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw");
  }();
  return available;
#else
  return false;
#endif
}

Bf16Gemm bf16_gemm_path(int m, int n, int k) {
  (void)n;
  (void)k;
  const Bf16Gemm forced = forced_path();
  if (forced == Bf16Gemm::Convert || (forced != Bf16Gemm::Auto && bf16_dot_available()))
    return forced;
  return m <= kDotMaxRows && bf16_dot_available() ? Bf16Gemm::Dot3 : Bf16Gemm::Convert;
}

void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                 bool accumulate) {
  linear_bf16_with(bf16_gemm_path(m, n, k), x, w, y, m, n, k, accumulate);
}

void linear_bf16_with(Bf16Gemm path, const float* x, const uint16_t* w, float* y, int m, int n,
                      int k, bool accumulate) {
  linear_bf16_from(path, 0, x, w, y, m, n, k, accumulate);
}

void linear_bf16_from(Bf16Gemm path, int first_row, const float* x, const uint16_t* w, float* y,
                      int m, int n, int k, bool accumulate) {
  if (m == 0 || n == 0 || first_row >= m) return;
  // The path of the whole product, whatever the rows kept: a row's numbers depend on it.
  if (path == Bf16Gemm::Auto) path = bf16_gemm_path(m, n, k);
  HYPIC_REQUIRE(path == Bf16Gemm::Convert || bf16_dot_available(),
                std::string("bf16 product path ") + bf16_gemm_name(path) +
                    " needs AVX-512 BF16 (this CPU or this build lacks it)");
  threads();
  const GemmTiling t = linear_tiling(m, n, k);
  const int terms = path == Bf16Gemm::Dot3 ? 3 : path == Bf16Gemm::Dot2 ? 2 : 1;
  const int kp = (k + 31) / 32 * 32;
  const int64_t skip = tiles_before(t, first_row);
  host::parallel_for(t.tiles() - skip, int64_t(t.mb) * t.nb * std::max(1, k), [&](int64_t i) {
    i += skip;
    const int r0 = static_cast<int>(i / t.tn) * t.mb, c0 = static_cast<int>(i % t.tn) * t.nb;
    const int rows = std::min(t.mb, m - r0), cols = std::min(t.nb, n - c0);
    const float* xt = x + static_cast<size_t>(r0) * k;
    float* yt = y + static_cast<size_t>(r0) * n + c0;
    if (path == Bf16Gemm::Convert) {
      // Weight rows widened in panels of 256: each element is still one sgemm over all of k.
      constexpr int kPanel = 256;
      thread_local std::vector<float> wide;
      for (int j0 = 0; j0 < cols; j0 += kPanel) {
        const int nc = std::min(kPanel, cols - j0);
        wide.resize(static_cast<size_t>(nc) * k);
        const uint16_t* src = w + static_cast<size_t>(c0 + j0) * k;
        for (size_t e = 0; e < wide.size(); ++e) wide[e] = widen_bf16(src[e]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nc, k, 1.0f, xt, k, wide.data(),
                    k, accumulate ? 1.0f : 0.0f, yt + j0, n);
      }
      return;
    }
    // Activations as bf16 terms, zero-padded to kp: t0 = bf16(x), t1 = bf16(x − t0),
    // t2 = bf16(x − t0 − t1); each remainder is exact in f32, and three terms hold all 24 bits.
    thread_local std::vector<uint16_t> xb;
    const size_t term = static_cast<size_t>(rows) * kp;
    xb.assign(term * terms, 0);
    for (int r = 0; r < rows; ++r)
      for (int p = 0; p < k; ++p) {
        float rest = xt[static_cast<size_t>(r) * k + p];
        for (int q = 0; q < terms; ++q) {
          const uint16_t h = round_to_bf16(rest);
          xb[q * term + static_cast<size_t>(r) * kp + p] = h;
          rest -= widen_bf16(h);
        }
      }
    host::bf16_dot_tile(xb.data(), term, kp, terms, rows, w + static_cast<size_t>(c0) * k, k, cols,
                        k, yt, n, accumulate);
  });
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}
std::string trim(std::string s) {
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}
}  // namespace

std::string blas_recommended_coretype() {
#if defined(HYPIC_BLAS_OPENBLAS)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";  // the user decided
  const std::string core = lower(openblas_get_corename());
  // Only correct a generic fallback; never override a specific detection.
  if (core != "prescott" && core != "core2" && core != "nehalem") return "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return "COOPERLAKE";
  if (__builtin_cpu_supports("avx512f")) return "SKYLAKEX";
  if (__builtin_cpu_supports("avx2")) return "HASWELL";
#endif
#endif
  return "";
}

BlasInfo blas_info() {
  BlasInfo info;
#if defined(HYPIC_BLAS_OPENBLAS)
  info.library = trim(OPENBLAS_VERSION);
  info.kernel = openblas_get_corename();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    info.note = std::string("kernel set by OPENBLAS_CORETYPE=") + forced;
    if (const char* why = std::getenv("HYPIC_BLAS_REEXEC"))
      info.note += std::string(" (") + why + ")";
  }
#elif defined(HYPIC_BLAS_BLIS)
  info.library = std::string("BLIS ") + bli_info_get_version_str();
  info.kernel = bli_arch_string(bli_arch_query_id());
#else
  info.library = "generic CBLAS";
  info.kernel = "unknown";
  info.note = "a generic CBLAS may run its own threads besides hypic's";
#endif
  info.threads = threads();
  return info;
}

void gemm_one_blas_call(int blas_threads, bool trans_a, bool trans_b, int m, int n, int k,
                        float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                        float* c, int ldc) {
  if (m == 0 || n == 0) return;
  threads();
#if defined(HYPIC_BLAS_OPENBLAS)
  openblas_set_num_threads(std::max(1, blas_threads));
#elif defined(HYPIC_BLAS_BLIS)
  bli_thread_set_num_threads(std::max(1, blas_threads));
#endif
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  blas_use_one_thread();
}

void blas_use_one_thread() {
#if defined(HYPIC_BLAS_OPENBLAS)
  openblas_set_num_threads(1);
#elif defined(HYPIC_BLAS_BLIS)
  bli_thread_set_num_threads(1);
#endif
}

}  // namespace hypic::kernels
