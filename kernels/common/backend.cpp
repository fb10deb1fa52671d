// What every backend shares: op names, the "lacks" error, picking a backend by device.
#include "hypic/kernels/backend.hpp"

#include <string>

namespace hypic::kernels {

const char* op_name(Op op) {
  switch (op) {
    case Op::Gemm:
      return "gemm";
    case Op::GemmStridedBatched:
      return "gemm_strided_batched";
    case Op::Linear:
      return "linear";
    case Op::CopyStrided:
      return "copy_strided";
    case Op::GatherRows:
      return "gather_rows";
    case Op::FamilyChunked:
      return "family_chunked";
    case Op::FamilyChunkedLowRank:
      return "family_chunked_lowrank";
    case Op::FamilyRecurrentF32:
      return "family_recurrent_f32";
    case Op::CausalConv1dSilu:
      return "causal_conv1d_silu";
    case Op::CausalConv1dTail:
      return "causal_conv1d_tail";
    case Op::RmsNormZeroCentred:
      return "rms_norm_zero_centred";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::GatedRmsNorm:
      return "gated_rms_norm";
    case Op::L2NormalizeRows:
      return "l2_normalize_rows";
    case Op::RopeApply:
      return "rope_apply";
    case Op::RopeShift:
      return "rope_shift";
    case Op::RotaryRotateRows:
      return "rotary_rotate_rows";
    case Op::RotaryRotateColumns:
      return "rotary_rotate_columns";
    case Op::AttentionCausal:
      return "attention_causal";
    case Op::SigmoidGate:
      return "sigmoid_gate";
    case Op::Swiglu:
      return "swiglu";
    case Op::AddSigmoidScaled:
      return "add_sigmoid_scaled";
    case Op::GdnGates:
      return "gdn_gates";
    case Op::MoeRoute:
      return "moe_route";
    case Op::MoeGroup:
      return "moe_group";
    case Op::MoeGather:
      return "moe_gather";
    case Op::MoeScatterAdd:
      return "moe_scatter_add";
    case Op::ComposeStates:
      return "compose_states";
    case Op::kCount:
      break;
  }
  return "?";
}

void Backend::lacks(Op op) const {
  throw Error(std::string("the ") + name() + " backend lacks the op " + op_name(op) +
              " (not implemented yet; run on the host backend)");
}

const Backend& backend_for(Device device) {
  return device == Device::Host ? host_backend() : cuda_backend();
}

}  // namespace hypic::kernels
