// The CUDA backend: device memory through the CUDA runtime, products through cuBLAS, every
// other op a hand-written kernel (kernels/cuda/<group>.cu, declared in ops.cuh). Every op is
// checked against the host references by the op harness (tests/unit/backend_ops_test.cpp)
// whenever a GPU is visible.
//
// Streams (docs/architecture.md, "Streams and events"): ops, device memory and copies to the
// host run on the compute stream, the legacy default stream, in call order. Uploads of
// segment entries run on a non-blocking upload stream and the NCCL link on a non-blocking
// stream of its own (nccl_link.cu); only events order them against the compute stream.
// synchronize() waits for the compute stream only, and memory comes from the device's
// stream-ordered pool (cudaMallocAsync / cudaFreeAsync on the compute stream), so neither a
// free nor a sync waits for an upload or a transfer in flight. The cross-stream hazards that a
// device-wide sync used to hide are ordered explicitly:
//  - an upload into a block waits for the compute stream to pass the block's allocation (the
//    pool may hand out memory that kernels queued earlier still read);
//  - a free waits (on the compute stream) for the uploads still writing into that block;
//  - ops read an upload's destination after upload_fence(ticket) (the callers' contract);
//  - the NCCL stream waits for the compute queued before a send or receive (nccl_link.cu).
//
// Why hand-written CUDA and not one Kokkos body for host and device: the Kokkos hypic builds
// against by default is Debian's 3.4.1 with the Serial backend only (no CUDA memory or
// execution space), so a Kokkos device path could not be compiled or tested here; and the
// heavy ops are vendor-library products (cuBLAS) in any case. The host kernels keep Kokkos'
// host execution space (RangePolicy over heads / tokens), which builds unchanged against
// Kokkos 3.4 and 4.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.cuh"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/device_book.hpp"
#include "ops.cuh"

namespace hypic::kernels {
namespace {

const cudaStream_t kCompute = cudaStreamLegacy;  // the compute stream

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    try {
      cuda::sync_debug() = device_book::sync_debug_setting(std::getenv("HYPIC_CUDA_SYNC_DEBUG"));
      cuda::tensor_cores_flag() =
          device_book::gemm_tensor_cores_setting(std::getenv("HYPIC_CUDA_GEMM"));
    } catch (const std::invalid_argument& e) {
      throw Error(e.what());
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
      cuda::keep_pool_mapped();  // the current device's; cuda::set_device does it for others
    else
      cudaGetLastError();  // no device: every call below reports it under its own name
  }
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  bool supports(Op op) const override { return op != Op::kCount; }
  // The compute stream only: uploads and NCCL transfers in flight keep running.
  void synchronize() const override {
    cuda::check(cudaStreamSynchronize(kCompute), "synchronize (compute stream)");
  }

  // Stream-ordered on the compute stream: the block is valid for every op queued after this
  // call; an event marks the allocation for the upload stream (upload_async).
  void* allocate(size_t bytes) const override {
    void* p = nullptr;
    cuda::check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, kCompute), "cudaMallocAsync");
    std::lock_guard<std::mutex> lock(mutex_);
    if (allocated_ == nullptr)  // on the device of the first allocation, as the pool is
      cuda::check(cudaEventCreateWithFlags(&allocated_, cudaEventDisableTiming),
                  "cudaEventCreate (allocations)");
    cuda::check(cudaEventRecord(allocated_, kCompute), "cudaEventRecord (allocation)");
    book_.allocated(p, bytes);
    return p;
  }
  // Freed once the ops queued so far (and the uploads still writing into the block) are done;
  // returns at once.
  void deallocate(void* ptr) const noexcept override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t upload = book_.released(ptr);
    if (upload != 0 && upload_stream_ != nullptr)
      cudaStreamWaitEvent(kCompute, upload_events_[upload % kUploadEvents], 0);
    cudaFreeAsync(ptr, kCompute);
  }
  // Waits for the compute queued so far (which wrote src).
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  void copy_within(void* dst, const void* src, size_t bytes) const override {
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kCompute),
                "cudaMemcpy D2D");
  }

  // Uploads run on their own non-blocking stream (no implicit ordering with the legacy
  // default stream the ops use), from page-locked staging memory, so the copy engine moves
  // an entry while kernels run. A ring of events marks the tickets; a fence on a ticket whose
  // event a later upload reused waits for that later one (same stream: later, never early).
  // Each upload first waits for the compute stream to pass the newest allocation (so at least
  // its destination's): the pool may reuse, for that block, memory freed by ops still queued.
  void* allocate_staging(size_t bytes) const override {
    void* p = nullptr;
    cuda::check(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault), "cudaHostAlloc");
    return p;
  }
  void free_staging(void* ptr) const noexcept override { cudaFreeHost(ptr); }
  uint64_t upload_async(void* dst, const void* staging, size_t bytes) const override {
    if (upload_stream_ == nullptr) {
      cuda::check(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking),
                  "cudaStreamCreate (uploads)");
      for (cudaEvent_t& e : upload_events_)
        cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (allocated_ != nullptr)
      cuda::check(cudaStreamWaitEvent(upload_stream_, allocated_, 0),
                  "cudaStreamWaitEvent (upload after allocation)");
    cuda::check(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, upload_stream_),
                "cudaMemcpyAsync H2D (upload)");
    const uint64_t ticket = ++uploads_;
    cuda::check(cudaEventRecord(upload_events_[ticket % kUploadEvents], upload_stream_),
                "cudaEventRecord (upload)");
    book_.uploaded(dst, bytes, ticket);
    return ticket;
  }
  void upload_fence(uint64_t ticket) const override {
    if (ticket == 0 || upload_stream_ == nullptr) return;
    cuda::check(cudaEventSynchronize(upload_events_[ticket % kUploadEvents]), "upload fence");
    std::lock_guard<std::mutex> lock(mutex_);
    book_.fenced(ticket);
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
  void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                   bool accumulate) const override {
    cuda::linear_bf16(x, w, y, m, n, k, accumulate);
  }
  // Tensor cores (HYPIC_CUDA_GEMM unset or bf16): bf16 weights in one grouped cuBLAS call;
  // f32 weights, or HYPIC_CUDA_GEMM=f32: one linear per group (Backend's default).
  void grouped_linear(const float* x, const Tensor* const* w, const int* start, int groups,
                      float* y, int n, int k) const override {
    std::vector<const uint16_t*> bf16(static_cast<size_t>(groups), nullptr);
    bool all_bf16 = cuda::tensor_cores_flag();
    for (int e = 0; e < groups && all_bf16; ++e) {
      if (start[e + 1] == start[e]) continue;
      HYPIC_REQUIRE(w[e] != nullptr, "grouped_linear: a non-empty group without a weight");
      const Tensor& t = *w[e];
      HYPIC_REQUIRE(t.device() == Device::Cuda && t.rank() == 2 && t.dim(1) == k && t.dim(0) >= n,
                    "grouped_linear: group " + std::to_string(e) + "'s weight " + t.shape_str() +
                        " in " + device_name(t.device()) + " memory is not a cuda [>= " +
                        std::to_string(n) + ", " + std::to_string(k) + "] matrix");
      if (t.dtype() != DType::BF16) all_bf16 = false;
      bf16[static_cast<size_t>(e)] = static_cast<const uint16_t*>(t.raw());
    }
    if (!all_bf16) {
      Backend::grouped_linear(x, w, start, groups, y, n, k);
      return;
    }
    cuda::grouped_linear_bf16(x, bf16.data(), start, groups, y, n, k);
  }
  bool tensor_core_products() const override { return cuda::tensor_cores_flag(); }
  void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows,
                    int cols) const override {
    cuda::copy_strided(src, src_ld, offset, dst, rows, cols);
  }
  void gather_rows(const float* table, int cols, const int32_t* ids, int n,
                   float* out) const override {
    cuda::gather_rows(table, cols, ids, n, out);
  }
  void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n,
                        float* out) const override {
    cuda::gather_rows_bf16(table, cols, ids, n, out);
  }

  void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                      float* state, float* out, float* transition, int chunk) const override {
    cuda::family_chunked(s, d, in, state, out, transition, chunk);
  }
  void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                              float* state, float* out, float* tdiag, float* x,
                              float* y) const override {
    cuda::family_chunked_lowrank(s, d, in, state, out, tdiag, x, y);
  }
  void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out) const override {
    cuda::family_recurrent_f32(s, d, in, state, out);
  }

  void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                          int K) const override {
    cuda::causal_conv1d_silu(x, w, state, y, T, C, K);
  }
  void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) const override {
    cuda::causal_conv1d_tail(x, state, T, C, K);
  }

  void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                             float eps) const override {
    cuda::rms_norm_zero_centred(x, w, y, rows, cols, eps);
  }
  void rms_norm(const float* x, const float* w, float* y, int rows, int cols,
                float eps) const override {
    cuda::rms_norm(x, w, y, rows, cols, eps);
  }
  void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                      float eps) const override {
    cuda::gated_rms_norm(x, z, w, y, rows, cols, eps);
  }
  void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) const override {
    cuda::l2_normalize_rows(x, rows, cols, eps, scale);
  }

  void rope_apply(const RopeDims& d, float* x, int64_t pos0) const override {
    cuda::rope_apply(d, x, pos0);
  }
  void rope_shift(const RopeDims& d, float* x, int64_t delta) const override {
    cuda::rope_shift(d, x, delta);
  }
  void rotary_rotate_rows(const Rotary& r, float* x, int n, int ld, int dk,
                          int64_t pos) const override {
    cuda::rotary_rotate_rows(r, x, n, ld, dk, pos);
  }
  void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols,
                             int64_t pos) const override {
    cuda::rotary_rotate_columns(r, m, dk, cols, pos);
  }
  void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                       int64_t pos) const override {
    cuda::rerotate_states(r, src, dst, heads, dk, dv, pos);
  }

  // The tiled kernel keeps its tiles in shared memory: no workspace, whatever n_kv is.
  size_t attention_workspace_floats(const AttentionDims&) const override { return 0; }
  void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                        float* out, float*) const override {
    cuda::attention_causal(d, q, k, v, out);
  }
  void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld) const override {
    cuda::sigmoid_gate(x, gate, rows, cols, gate_ld);
  }

  void swiglu(const float* gate_up, float* out, int rows, int width) const override {
    cuda::swiglu(gate_up, out, rows, width);
  }
  void axpby(const float* x, float* y, int64_t n, float a, float b) const override {
    cuda::axpby(x, y, n, a, b);
  }
  void round_to_dtype(float* x, int64_t n, DType dtype) const override {
    cuda::round_to_dtype(x, n, dtype);
  }
  void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows,
                          int cols) const override {
    cuda::add_sigmoid_scaled(x, y, logit, rows, cols);
  }
  void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
                 float* beta, float* g, int rows, int heads) const override {
    cuda::gdn_gates(b, a, ld, A_log, dt_bias, beta, g, rows, heads);
  }

  void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
                 float* weights) const override {
    cuda::moe_route(s, logits, bias, T, experts, weights);
  }
  void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids,
                 int* work) const override {
    cuda::moe_group(experts, T, k, E, start, pair_ids, work);
  }
  void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k,
                  float* xe) const override {
    cuda::moe_gather(x, hidden, pair_ids, n, k, xe);
  }
  void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                       const float* weights, float* out) const override {
    cuda::moe_scatter_add(ye, hidden, pair_ids, n, k, weights, out);
  }
  void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                   const float* weights, float* out, int* work) const override {
    cuda::moe_combine(ye, hidden, pair_ids, T, k, weights, out, work);
  }

  void compose_states(const TransitionRef* sums, float* const* states, int n,
                      bool addition) const override {
    cuda::compose_states(sums, states, n, addition);
  }

 private:
  static constexpr uint64_t kUploadEvents = 16;
  mutable std::mutex mutex_;                 // the bookkeeping below
  mutable device_book::UploadBook book_;     // live blocks and the uploads into them
  mutable cudaEvent_t allocated_ = nullptr;  // recorded after each allocation
  mutable cudaStream_t upload_stream_ = nullptr;
  mutable cudaEvent_t upload_events_[kUploadEvents] = {};
  mutable uint64_t uploads_ = 0;
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace hypic::kernels
