// What every backend shares: op names, the "lacks" error, picking a backend by device.
#include "hypic/kernels/backend.hpp"

#include <cstdlib>
#include <new>
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
    case Op::LinearBf16:
      return "linear_bf16";
    case Op::CopyStrided:
      return "copy_strided";
    case Op::GatherRows:
      return "gather_rows";
    case Op::GatherRowsBf16:
      return "gather_rows_bf16";
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
    case Op::RerotateStates:
      return "rerotate_states";
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
    case Op::MoeCombine:
      return "moe_combine";
    case Op::GroupedLinear:
      return "grouped_linear";
    case Op::ComposeStates:
      return "compose_states";
    case Op::Axpby:
      return "axpby";
    case Op::RoundToDtype:
      return "round_to_dtype";
    case Op::kCount:
      break;
  }
  return "?";
}

void Backend::lacks(Op op) const {
  throw Error(std::string("the ") + name() + " backend lacks the op " + op_name(op) +
              " (not implemented yet; run on the host backend)");
}

void* Backend::allocate_staging(size_t bytes) const {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void Backend::free_staging(void* ptr) const noexcept {
  std::free(ptr);
}
uint64_t Backend::upload_async(void* dst, const void* staging, size_t bytes) const {
  copy_from_host(dst, staging, bytes);
  return 0;
}

namespace {
// A weight handed to an op must be this backend's memory, in a dtype the op has a form for.
void check_weight(const Backend& be, const Tensor& w, const char* what) {
  HYPIC_REQUIRE(w.device() == be.device(), std::string(what) + ": the weight is in " +
                                               device_name(w.device()) + " memory, the " +
                                               be.name() + " backend computes in " +
                                               device_name(be.device()) + " memory");
  HYPIC_REQUIRE(w.dtype() == DType::F32 || w.dtype() == DType::BF16,
                std::string(what) + ": weights in " + dtype_name(w.dtype()) +
                    " have no product here (f32 or bf16)");
}
}  // namespace

void Backend::linear(const float* x, const Tensor& w, float* y, int m, int n, int k,
                     bool accumulate, int64_t row0) const {
  check_weight(*this, w, "linear");
  HYPIC_REQUIRE(w.rank() == 2 && w.dim(1) == k && row0 >= 0 && row0 + n <= w.dim(0),
                "linear: rows " + std::to_string(row0) + ".." + std::to_string(row0 + n) + " of " +
                    std::to_string(k) + " columns do not fit a weight of shape " + w.shape_str());
  const size_t offset = static_cast<size_t>(row0) * static_cast<size_t>(k);
  if (w.dtype() == DType::BF16)
    linear_bf16(x, static_cast<const uint16_t*>(w.raw()) + offset, y, m, n, k, accumulate);
  else
    linear(x, static_cast<const float*>(w.raw()) + offset, y, m, n, k, accumulate);
}

void Backend::grouped_linear(const float* x, const Tensor* const* w, const int* start, int groups,
                             float* y, int n, int k) const {
  for (int e = 0; e < groups; ++e) {
    const int rows = start[e + 1] - start[e];
    HYPIC_REQUIRE(rows >= 0, "grouped_linear: group starts must ascend");
    if (rows == 0) continue;
    HYPIC_REQUIRE(w[e] != nullptr, "grouped_linear: a non-empty group without a weight");
    const size_t r0 = static_cast<size_t>(start[e]);
    linear(x + r0 * static_cast<size_t>(k), *w[e], y + r0 * static_cast<size_t>(n), rows, n, k,
           false);
  }
}

void Backend::linear_from(int first, const float* x, const Tensor& w, float* y, int m, int n, int k,
                          bool accumulate) const {
  (void)first;
  linear(x, w, y, m, n, k, accumulate);
}

void Backend::grouped_linear_from(const int* first, const float* x, const Tensor* const* w,
                                  const int* start, int groups, float* y, int n, int k) const {
  (void)first;
  grouped_linear(x, w, start, groups, y, n, k);
}

void Backend::gather_rows(const Tensor& table, const int32_t* ids, int n, float* out) const {
  check_weight(*this, table, "gather_rows");
  HYPIC_REQUIRE(table.rank() == 2, "gather_rows: the table has shape " + table.shape_str());
  const int cols = static_cast<int>(table.dim(1));
  if (table.dtype() == DType::BF16)
    gather_rows_bf16(static_cast<const uint16_t*>(table.raw()), cols, ids, n, out);
  else
    gather_rows(static_cast<const float*>(table.raw()), cols, ids, n, out);
}

const Backend& backend_for(Device device) {
  return device == Device::Host ? host_backend() : cuda_backend();
}

}  // namespace hypic::kernels
