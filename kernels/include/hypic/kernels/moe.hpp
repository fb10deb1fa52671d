#pragma once
// Mixture-of-experts routing (Qwen3-Next): softmax over all experts, the top k kept, their
// weights renormalised to sum 1 when norm_topk. Implementation: kernels/host/moe.cpp.
namespace hypic::kernels {

// logits: [T, E] router logits; experts, weights: [T, k] chosen experts in descending
// probability order (ties: lower index first) and their weights.
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

}  // namespace hypic::kernels
