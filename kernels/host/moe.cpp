// Host MoE routing, tokens in parallel; gather and scatter over an expert's rows in parallel
// (one expert's rows never share a token). parallel.hpp says how.
#include "hypic/kernels/moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "parallel.hpp"

namespace hypic::kernels {
namespace {}

void moe_route(const float* logits, int T, int E, int k, bool norm_topk, int* experts,
               float* weights) {
  if (k <= 0 || k > E || E > 4096)
    throw std::invalid_argument("moe_route: need 0 < k <= E <= 4096");
  host::parallel_for(T, int64_t(E) * (k + 8), [=](const int64_t t) {
    const float* lt = logits + static_cast<size_t>(t) * E;
    int* et = experts + static_cast<size_t>(t) * k;
    float* wt = weights + static_cast<size_t>(t) * k;
    float mx = lt[0];
    for (int e = 1; e < E; ++e) mx = lt[e] > mx ? lt[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += std::exp(lt[e] - mx);
    // Selection by repeated scans: k and E are small, and it keeps ties deterministic.
    bool taken[4096] = {};
    float chosen_sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || lt[e] > lt[best])) best = e;
      taken[best] = true;
      et[j] = best;
      wt[j] = std::exp(lt[best] - mx) / sum;
      chosen_sum += wt[j];
    }
    if (norm_topk)
      for (int j = 0; j < k; ++j) wt[j] /= chosen_sum;
  });
}

}  // namespace hypic::kernels

namespace hypic::kernels {

void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids, int* work) {
  const size_t pairs = static_cast<size_t>(T) * k;
  std::fill(start, start + E + 1, 0);
  for (size_t i = 0; i < pairs; ++i) ++start[experts[i] + 1];
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  std::copy(start, start + E, work);
  for (size_t i = 0; i < pairs; ++i) pair_ids[work[experts[i]]++] = static_cast<int>(i);
}

void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k, float* xe) {
  host::parallel_for(n, hidden, [=](const int64_t r) {
    std::memcpy(xe + static_cast<size_t>(r) * hidden,
                x + static_cast<size_t>(pair_ids[r] / k) * hidden, sizeof(float) * hidden);
  });
}

void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                     const float* weights, float* out) {
  // Rows of one call belong to distinct tokens (one expert's pairs), so no two write one row.
  host::parallel_for(n, 2 * int64_t(hidden), [=](const int64_t r) {
    const float wt = weights[pair_ids[r]];
    float* o = out + static_cast<size_t>(pair_ids[r] / k) * hidden;
    const float* y = ye + static_cast<size_t>(r) * hidden;
    for (int c = 0; c < hidden; ++c) o[c] += wt * y[c];
  });
}

}  // namespace hypic::kernels
