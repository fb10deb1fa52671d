// Host BLAS: the CBLAS entry points of the library chosen at configure time.
#include "hypic/kernels/blas.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#if defined(HYPIC_BLAS_BLIS)
#include <blis.h>
#include <cblas.h>
#else
#include <cblas.h>
#endif

namespace hypic::kernels {

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate) {
  gemm(false, true, m, n, k, 1.0f, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
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
  info.threads = openblas_get_num_threads();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    info.note = std::string("kernel set by OPENBLAS_CORETYPE=") + forced;
    if (const char* why = std::getenv("HYPIC_BLAS_REEXEC"))
      info.note += std::string(" (") + why + ")";
  }
#elif defined(HYPIC_BLAS_BLIS)
  info.library = std::string("BLIS ") + bli_info_get_version_str();
  info.kernel = bli_arch_string(bli_arch_query_id());
  info.threads = static_cast<int>(bli_thread_get_num_threads());
#else
  info.library = "generic CBLAS";
  info.kernel = "unknown";
#endif
  return info;
}

void set_blas_threads(int n) {
  n = std::max(1, n);
#if defined(HYPIC_BLAS_OPENBLAS)
  openblas_set_num_threads(n);
#elif defined(HYPIC_BLAS_BLIS)
  bli_thread_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace hypic::kernels
