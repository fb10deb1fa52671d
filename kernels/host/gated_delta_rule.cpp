// Gated DeltaNet (Qwen3-Next / Qwen3.5 linear layers): the scalar-decay delta-rule member of
// the linear-attention family. Both entry points run the family kernels, so the model forward
// and the PIC summaries share one implementation (kernels/host/linear_family.cpp).
#include "hypic/kernels/linear_attention.hpp"
#include "hypic/kernels/linear_family.hpp"

namespace hypic::kernels {
namespace {
FamilyDims family_dims(const DeltaRuleDims& d) {
  return {d.T, d.Hk, d.Hv, d.dk, d.dv};
}
}  // namespace

void gated_delta_rule_recurrent(const DeltaRuleDims& d, const float* q, const float* k,
                                const float* v, const float* g, const float* beta, float* state,
                                float* out) {
  family_recurrent_f32(member_spec(Member::GatedDeltaNet), family_dims(d), {q, k, v, g, beta},
                       state, out);
}

void gated_delta_rule_chunked(const DeltaRuleDims& d, const float* q, const float* k,
                              const float* v, const float* g, const float* beta, float* state,
                              float* out, float* transition, int chunk) {
  family_chunked(member_spec(Member::GatedDeltaNet), family_dims(d), {q, k, v, g, beta}, state, out,
                 transition, chunk);
}

}  // namespace hypic::kernels
