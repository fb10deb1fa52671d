#include "model/flops.hpp"

#include <algorithm>

namespace hypic::model {

FlopCount prefill_flops(const ModelConfig& c, int64_t tokens, int64_t past, int64_t logit_rows,
                        int chunk) {
  const double T = static_cast<double>(tokens);
  const double h = c.hidden_size;
  FlopCount f;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (c.layer_types[layer] == LayerKind::Lightning ||
        c.layer_types[layer] == LayerKind::RingLinear) {
      // qkv, output gate and out_proj; the recurrence as a non-erasing member (S update and
      // Sᵀq, plus the intra-chunk Q Kᵀ and its product with V).
      const double width = static_cast<double>(c.num_attention_heads) * c.head_dim;
      f.projections += 2.0 * T * h * 5.0 * width;
      const double d = c.head_dim;
      const double C = std::min<double>(chunk, std::max<double>(T, 1.0));
      f.delta_rule += 2.0 * T * c.num_attention_heads * (2.0 * d * d + C * 2.0 * d);
    } else if (is_linear_kind(
                   c.layer_types[layer])) {  // KDA counted as Gated DeltaNet (approximate)
      const double in_rows =
          c.linear_conv_dim() + c.linear_value_dim() + 2.0 * c.linear_num_value_heads;
      f.projections += 2.0 * T * h * (in_rows + c.linear_value_dim());
      // Per value head and token of the chunked form: Sᵀq and the state update (3 dk·dv
      // products) plus the intra-chunk products (K Kᵀ, Q Kᵀ with dk; two with dv).
      const double dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const double C = std::min<double>(chunk, std::max<double>(T, 1.0));
      f.delta_rule +=
          2.0 * T * c.linear_num_value_heads * (3.0 * dk * dv + C * (2.0 * dk + 2.0 * dv));
    } else {
      const double hd = c.head_dim;
      const double q_rows = (c.attention_output_gate ? 2.0 : 1.0) * c.num_attention_heads * hd;
      const double kv_rows = 2.0 * c.num_key_value_heads * hd;
      f.projections += 2.0 * T * h * (q_rows + kv_rows + c.num_attention_heads * hd);
      // Token i attends to past + i + 1 keys: Σ = T·past + T(T+1)/2; two products of hd.
      const double pairs = T * static_cast<double>(past) + T * (T + 1.0) / 2.0;
      f.attention += 2.0 * 2.0 * pairs * hd * c.num_attention_heads;
    }
    if (c.layer_is_moe(layer)) {
      f.projections += 2.0 * T * h * c.num_experts;  // router
      f.projections += 2.0 * T * h * 3.0 * c.moe_intermediate_size * c.num_experts_per_tok;
      f.projections += 2.0 * T * h * (3.0 * c.shared_expert_intermediate_size + 1.0);
    } else {
      f.projections += 2.0 * T * h * 3.0 * c.intermediate_size;
    }
  }
  f.lm_head = 2.0 * static_cast<double>(logit_rows) * h * c.vocab_size;
  return f;
}

}  // namespace hypic::model
