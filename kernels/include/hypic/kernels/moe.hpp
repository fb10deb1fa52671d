#pragma once
// Mixture-of-experts routing and the bookkeeping around the expert products.
// Implementation: kernels/host/moe.cpp (reference: tests/unit/op_reference.hpp).
namespace hypic::kernels {

enum class RouteScoring { Softmax, Sigmoid };

// How a router turns logits into k experts and their weights.
//  Softmax (Qwen3-Next, Qwen3.5, MiniMax): p = softmax(logits); the k largest p are chosen.
//  Sigmoid (DeepSeek-V3 style: Kimi-Linear, Ring): p = sigmoid(logits); experts are chosen by
//    p + bias (bias: the checkpoint's e_score_correction_bias, or none), first restricted to the
//    topk_group best of n_group equal groups of experts (a group's score: the sum of its two
//    best p + bias), but weighted by p alone.
// Then, either way: weights renormalised to sum 1 when norm_topk (sigmoid: / (Σ + 1e-20)),
// and multiplied by scale (routed_scaling_factor).
struct MoeRouteSpec {
  int experts = 0;  // E
  int top_k = 0;    // k
  RouteScoring scoring = RouteScoring::Softmax;
  bool norm_topk = true;
  int n_group = 1;     // > 1: grouped selection (sigmoid only); E % n_group == 0
  int topk_group = 1;  // groups kept, 1 … n_group
  float scale = 1.0f;  // routed_scaling_factor
};
// Throws std::invalid_argument naming what is inconsistent (k, E, groups, bias with softmax).
void check_route_spec(const MoeRouteSpec& s, bool has_bias);

// logits: [T, E] router logits; bias: [E] or nullptr; experts, weights: [T, k] chosen experts
// in descending order of their selection score (ties: lower index first) and their weights.
void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
               float* weights);

// The softmax router (Qwen3-Next): moe_route with MoeRouteSpec{E, k, Softmax, norm_topk}.
void moe_route(const float* logits, int T, int E, int k, bool norm_topk, int* experts,
               float* weights);

// Groups the T·k (token, slot) pairs by expert (a counting sort): pairs of expert e are
// pair_ids[start[e] … start[e+1]) as t·k + j, tokens ascending. start [E+1], work [E].
void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids, int* work);

// xe[r, :] = x[pair_ids[r] / k, :] for r < n: the rows an expert's products read.
void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k, float* xe);

// out[pair_ids[r] / k, :] += weights[pair_ids[r]] · ye[r, :] for r < n, rows in parallel: two
// pairs of one expert never share a token, so the pairs of one call must be one expert's (the
// caller's experts run one after another, which keeps each row's sum in expert order).
void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                     const float* weights, float* out);

// Every expert's rows at once (Backend::moe_combine): out[t, :] += Σ_j weights[t·k + j] ·
// ye[row(t·k + j), :], the terms of a token in ascending row (= expert) order, so the sums are
// bit for bit those of moe_scatter_add per expert in ascending order. work: [T·k] ints.
// k ≤ kMoeCombineMaxK (std::invalid_argument otherwise).
constexpr int kMoeCombineMaxK = 64;
void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                 const float* weights, float* out, int* work);

}  // namespace hypic::kernels
