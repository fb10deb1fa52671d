// The CUDA backend: device memory through the CUDA runtime, products through cuBLAS, the
// other ops as hand-written kernels (one per ops.cuh entry). Ops without a kernel yet throw
// "the cuda backend lacks the op ..." and report supports(op) == false; the op harness lists
// them as skipped. (The GPU issue fills them in, each checked by the op harness.)
//
// Why hand-written CUDA and not one Kokkos body for host and device: the Kokkos hypic builds
// against by default is Debian's 3.4.1 with the Serial backend only (no CUDA memory or
// execution space), so a Kokkos device path could not be compiled or tested here; and the
// heavy ops are vendor-library products (cuBLAS) in any case. The host kernels keep Kokkos'
// host execution space (RangePolicy over heads / tokens), which builds unchanged against
// Kokkos 3.4 and 4.
#include <cuda_runtime.h>

#include "check.cuh"
#include "hypic/kernels/backend.hpp"
#include "ops.cuh"

namespace hypic::kernels {
namespace {

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  bool supports(Op op) const override {
    switch (op) {
      case Op::Gemm:
      case Op::GemmStridedBatched:
      case Op::Linear:
      case Op::CopyStrided:
      case Op::RmsNormZeroCentred:
        return true;
      default:
        return false;
    }
  }
  void synchronize() const override { cuda::check(cudaDeviceSynchronize(), "synchronize"); }

  void* allocate(size_t bytes) const override {
    void* p = nullptr;
    cuda::check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void deallocate(void* ptr) const noexcept override { cudaFree(ptr); }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  void copy_within(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) const override {
    cuda::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_strided_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                            int lda, int64_t sa, const float* b, int ldb, int64_t sb, float beta,
                            float* c, int ldc, int64_t sc, int batch) const override {
    cuda::gemm_strided_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                               batch);
  }
  void linear(const float* x, const float* w, float* y, int m, int n, int k,
              bool accumulate) const override {
    cuda::gemm(false, true, m, n, k, 1.0f, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
  }
  void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows,
                    int cols) const override {
    if (rows == 0 || cols == 0) return;
    cuda::check(cudaMemcpy2D(dst, sizeof(float) * cols, src + offset, sizeof(float) * src_ld,
                             sizeof(float) * cols, rows, cudaMemcpyDeviceToDevice),
                "cudaMemcpy2D");
  }
  void gather_rows(const float*, int, const int32_t*, int, float*) const override {
    lacks(Op::GatherRows);
  }

  void family_chunked(const FamilySpec&, const FamilyDims&, const FamilyInputs&, float*, float*,
                      float*, int) const override {
    lacks(Op::FamilyChunked);
  }
  void family_chunked_lowrank(const FamilySpec&, const FamilyDims&, const FamilyInputs&, float*,
                              float*, float*, float*, float*) const override {
    lacks(Op::FamilyChunkedLowRank);
  }
  void family_recurrent_f32(const FamilySpec&, const FamilyDims&, const FamilyInputs&, float*,
                            float*) const override {
    lacks(Op::FamilyRecurrentF32);
  }
  void causal_conv1d_silu(const float*, const float*, float*, float*, int, int,
                          int) const override {
    lacks(Op::CausalConv1dSilu);
  }
  void causal_conv1d_tail(const float*, float*, int, int, int) const override {
    lacks(Op::CausalConv1dTail);
  }
  void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                             float eps) const override {
    cuda::rms_norm_zero_centred(x, w, y, rows, cols, eps);
  }
  void gated_rms_norm(const float*, const float*, const float*, float*, int, int,
                      float) const override {
    lacks(Op::GatedRmsNorm);
  }
  void l2_normalize_rows(float*, int, int, float, float) const override {
    lacks(Op::L2NormalizeRows);
  }
  void rope_apply(const RopeDims&, float*, int64_t) const override { lacks(Op::RopeApply); }
  void rope_shift(const RopeDims&, float*, int64_t) const override { lacks(Op::RopeShift); }
  void rotary_rotate_rows(const Rotary&, float*, int, int, int, int64_t) const override {
    lacks(Op::RotaryRotateRows);
  }
  void rotary_rotate_columns(const Rotary&, float*, int, int, int64_t) const override {
    lacks(Op::RotaryRotateColumns);
  }
  size_t attention_workspace_floats(const AttentionDims&) const override {
    lacks(Op::AttentionCausal);
  }
  void attention_causal(const AttentionDims&, const float*, const float*, const float*, float*,
                        float*) const override {
    lacks(Op::AttentionCausal);
  }
  void sigmoid_gate(float*, const float*, int, int, int) const override { lacks(Op::SigmoidGate); }
  void swiglu(const float*, float*, int, int) const override { lacks(Op::Swiglu); }
  void add_sigmoid_scaled(float*, const float*, const float*, int, int) const override {
    lacks(Op::AddSigmoidScaled);
  }
  void gdn_gates(const float*, const float*, int, const float*, const float*, float*, float*, int,
                 int) const override {
    lacks(Op::GdnGates);
  }
  void moe_route(const float*, int, int, int, bool, int*, float*) const override {
    lacks(Op::MoeRoute);
  }
  void moe_group(const int*, int, int, int, int*, int*, int*) const override {
    lacks(Op::MoeGroup);
  }
  void moe_gather(const float*, int, const int*, int, int, float*) const override {
    lacks(Op::MoeGather);
  }
  void moe_scatter_add(const float*, int, const int*, int, int, const float*,
                       float*) const override {
    lacks(Op::MoeScatterAdd);
  }
  void compose_states(const TransitionRef*, float* const*, int, bool) const override {
    lacks(Op::ComposeStates);
  }
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace hypic::kernels
