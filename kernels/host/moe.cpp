// Host MoE routing, tokens in parallel; gather and scatter over an expert's rows in parallel
// (one expert's rows never share a token). parallel.hpp says how.
#include "hypic/kernels/moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "parallel.hpp"

namespace hypic::kernels {
namespace {}

void check_route_spec(const MoeRouteSpec& s, bool has_bias) {
  const int E = s.experts, k = s.top_k;
  if (k <= 0 || k > E || E > 4096)
    throw std::invalid_argument("moe_route: need 0 < k <= E <= 4096");
  if (s.n_group < 1 || s.topk_group < 1 || s.topk_group > s.n_group || E % s.n_group != 0)
    throw std::invalid_argument(
        "moe_route: need n_group dividing E and 1 <= topk_group <= n_group");
  if (s.n_group > 1 && (E / s.n_group < 2 || k > s.topk_group * (E / s.n_group)))
    throw std::invalid_argument(
        "moe_route: grouped routing needs 2+ experts per group and k within the kept groups");
  if (s.scoring == RouteScoring::Softmax && (has_bias || s.n_group > 1))
    throw std::invalid_argument(
        "moe_route: a selection bias and expert groups need sigmoid scoring");
}

void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
               float* weights) {
  check_route_spec(s, bias != nullptr);
  const int E = s.experts, k = s.top_k;
  host::parallel_for(T, int64_t(E) * (k + 8), [=](const int64_t t) {
    const float* lt = logits + static_cast<size_t>(t) * E;
    int* et = experts + static_cast<size_t>(t) * k;
    float* wt = weights + static_cast<size_t>(t) * k;
    // Selection by repeated scans: k and E are small, and it keeps ties deterministic.
    bool taken[4096] = {};
    float chosen_sum = 0.0f;
    if (s.scoring == RouteScoring::Softmax) {
      float mx = lt[0];
      for (int e = 1; e < E; ++e) mx = lt[e] > mx ? lt[e] : mx;
      float sum = 0.0f;
      for (int e = 0; e < E; ++e) sum += std::exp(lt[e] - mx);
      for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e)
          if (!taken[e] && (best < 0 || lt[e] > lt[best])) best = e;
        taken[best] = true;
        et[j] = best;
        wt[j] = std::exp(lt[best] - mx) / sum;
        chosen_sum += wt[j];
      }
      if (s.norm_topk)
        for (int j = 0; j < k; ++j) wt[j] /= chosen_sum;
    } else {
      float p[4096], choice[4096];
      for (int e = 0; e < E; ++e) {
        p[e] = 1.0f / (1.0f + std::exp(-lt[e]));
        choice[e] = bias != nullptr ? p[e] + bias[e] : p[e];
      }
      if (s.n_group > 1) {
        // Keep the topk_group groups with the largest sum of their two best choices; the
        // experts of the other groups count as already taken.
        const int per = E / s.n_group;
        float group_score[4096];
        bool kept[4096] = {};
        for (int g = 0; g < s.n_group; ++g) {
          float b1 = -INFINITY, b2 = -INFINITY;
          for (int e = g * per; e < (g + 1) * per; ++e) {
            if (choice[e] > b1) {
              b2 = b1;
              b1 = choice[e];
            } else if (choice[e] > b2) {
              b2 = choice[e];
            }
          }
          group_score[g] = b1 + b2;
        }
        for (int j = 0; j < s.topk_group; ++j) {
          int best = -1;
          for (int g = 0; g < s.n_group; ++g)
            if (!kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
          kept[best] = true;
        }
        for (int e = 0; e < E; ++e) taken[e] = !kept[e / per];
      }
      for (int j = 0; j < k; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e)
          if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
        taken[best] = true;
        et[j] = best;
        wt[j] = p[best];
        chosen_sum += wt[j];
      }
      if (s.norm_topk)
        for (int j = 0; j < k; ++j) wt[j] /= chosen_sum + 1e-20f;
    }
    if (s.scale != 1.0f)
      for (int j = 0; j < k; ++j) wt[j] *= s.scale;
  });
}

void moe_route(const float* logits, int T, int E, int k, bool norm_topk, int* experts,
               float* weights) {
  MoeRouteSpec s;
  s.experts = E;
  s.top_k = k;
  s.norm_topk = norm_topk;
  moe_route(s, logits, nullptr, T, experts, weights);
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

void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                 const float* weights, float* out, int* work) {
  if (k < 1 || k > kMoeCombineMaxK)
    throw std::invalid_argument("moe_combine: experts per token must be 1 to " +
                                std::to_string(kMoeCombineMaxK) + ", not " + std::to_string(k));
  const int64_t pairs = int64_t(T) * k;
  for (int64_t r = 0; r < pairs; ++r) work[pair_ids[r]] = static_cast<int>(r);  // row of a pair
  host::parallel_for(T, 2 * int64_t(hidden) * k, [=](const int64_t t) {
    // The token's rows in ascending order (insertion sort of k ≤ a few dozen).
    int rows[kMoeCombineMaxK];
    int slots[kMoeCombineMaxK];
    for (int j = 0; j < k; ++j) {
      int r = work[t * k + j], s = j, i = j;
      for (; i > 0 && rows[i - 1] > r; --i) {
        rows[i] = rows[i - 1];
        slots[i] = slots[i - 1];
      }
      rows[i] = r;
      slots[i] = s;
    }
    float* o = out + static_cast<size_t>(t) * hidden;
    for (int i = 0; i < k; ++i) {
      const float wt = weights[t * k + slots[i]];
      const float* y = ye + static_cast<size_t>(rows[i]) * hidden;
      for (int c = 0; c < hidden; ++c) o[c] += wt * y[c];
    }
  });
}

}  // namespace hypic::kernels
