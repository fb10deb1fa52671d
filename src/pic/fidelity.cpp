#include "pic/fidelity.hpp"

#include <algorithm>
#include <cmath>

namespace hypic::pic {
namespace {

// log Σ exp(x) in double.
double log_sum_exp(const float* x, int64_t n) {
  double m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

}  // namespace

double kl_divergence_logits(const float* p_logits, const float* q_logits, int64_t n) {
  if (n <= 0) return 0.0;
  const double lp = log_sum_exp(p_logits, n), lq = log_sum_exp(q_logits, n);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double log_p = p_logits[i] - lp, log_q = q_logits[i] - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

double relative_l2(const float* a, const float* ref, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : INFINITY;
  return std::sqrt(diff / norm);
}

TokenAgreement token_agreement(const std::vector<int32_t>& ref, const std::vector<int32_t>& got) {
  TokenAgreement a;
  a.exact = ref == got;
  if (ref.empty()) return a;
  size_t same = 0;
  while (same < ref.size() && same < got.size() && ref[same] == got[same]) ++same;
  a.prefix_fraction = static_cast<double>(same) / static_cast<double>(ref.size());
  return a;
}

}  // namespace hypic::pic
