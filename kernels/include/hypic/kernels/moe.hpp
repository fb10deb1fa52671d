#pragma once
// Mixture-of-experts routing (Qwen3-Next): softmax over all experts, the top k kept, their
// weights renormalised to sum 1 when norm_topk. Implementation: kernels/host/moe.cpp.
namespace hypic::kernels {

// logits: [T, E] router logits; experts, weights: [T, k] chosen experts in descending
// probability order (ties: lower index first) and their weights.
void moe_route(const float* logits, int T, int E, int k, bool norm_topk, int* experts,
               float* weights);

}  // namespace hypic::kernels
