#pragma once
// How far a cached mode's answer is from full recompute (the ground truth).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hypic::pic {

// KL(softmax(p) ‖ softmax(q)) in nats over n logits, accumulated in double.
double kl_divergence_logits(const float* p_logits, const float* q_logits, int64_t n);
// ‖a − ref‖₂ / ‖ref‖₂ (0 when both are zero).
double relative_l2(const float* a, const float* ref, size_t n);

struct TokenAgreement {
  double prefix_fraction = 1.0;  // positions equal before the first divergence / len(ref)
  bool exact = true;             // the same sequence
};
TokenAgreement token_agreement(const std::vector<int32_t>& ref, const std::vector<int32_t>& got);

}  // namespace hypic::pic
