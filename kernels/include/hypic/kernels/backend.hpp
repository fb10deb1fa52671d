#pragma once
// The backend object (Ginkgo's executor, ggml's backend): one virtual per operation, the same
// signatures for every backend, and the memory of the device it computes on. model/ and pic/
// receive a `const Backend&` and call every op through it; they never call an implementation.
//
// Pointers passed to an op are memory of the backend's device (host pointers for
// host_backend(), device pointers for cuda_backend()); dims are plain structs. One virtual call
// per op and layer: the loops stay inside the implementations.
//
// Backends: host (kernels/host/: BLAS + OpenMP threads; backend in
// kernels/host/host_backend.cpp) and cuda (kernels/cuda/: hand-written CUDA + cuBLAS, see
// kernels/cuda/cuda_backend.cu for why not Kokkos). An op a backend does not implement yet
// throws hypic::Error naming the op and the backend; supports(op) says so beforehand, so the op
// harness (tests/unit/backend_ops_test.cpp) can list what it skipped.
//
// Threads: the host kernels run their loops over heads, tokens, rows or (layer, head) items on
// kernels::threads() OpenMP threads (threads.hpp), and split BLAS products into tiles fixed by
// their shape; results are bit-identical at every thread count. Not Kokkos: the Kokkos hypic
// builds against by default, Debian's 3.4.1, is Serial-only (one core), and has no CUDA space
// to compile or test a shared host/device body here. The CUDA backend is hand-written CUDA +
// cuBLAS instead (kernels/cuda/); a Kokkos device path can replace both once a CUDA-enabled
// Kokkos is the build's Kokkos, behind this same interface.
//
// Adding an op: a value in Op (and its name in op_name), a pure virtual here, the host
// implementation, an entry in the CUDA backend (kernel or "lacks" error), a reference and a
// shape grid in the op harness.
#include <cstddef>
#include <cstdint>
#include <string>

#include "hypic/kernels/attention.hpp"
#include "hypic/kernels/compose.hpp"
#include "hypic/kernels/linear_family.hpp"
#include "hypic/kernels/moe.hpp"
#include "hypic/kernels/rope.hpp"
#include "hypic/tensor.hpp"

namespace hypic::kernels {

enum class Op {
  Gemm,
  GemmStridedBatched,
  Linear,
  LinearBf16,
  CopyStrided,
  GatherRows,
  GatherRowsBf16,
  FamilyChunked,
  FamilyChunkedLowRank,
  FamilyRecurrentF32,
  CausalConv1dSilu,
  CausalConv1dTail,
  RmsNormZeroCentred,
  RmsNorm,
  GatedRmsNorm,
  L2NormalizeRows,
  RopeApply,
  RopeShift,
  RotaryRotateRows,
  RotaryRotateColumns,
  RerotateStates,
  AttentionCausal,
  SigmoidGate,
  Swiglu,
  AddSigmoidScaled,
  GdnGates,
  MoeRoute,
  MoeGroup,
  MoeGather,
  MoeScatterAdd,
  MoeCombine,
  GroupedLinear,
  ComposeStates,
  Axpby,
  RoundToDtype,
  kCount
};
const char* op_name(Op op);

class Backend : public Allocator {
 public:
  virtual const char* name() const = 0;  // "host", "cuda"
  // Whether op runs here; ops that do not throw hypic::Error naming the op and the backend.
  virtual bool supports(Op op) const = 0;
  // Waits for the ops queued so far on the compute stream, not for uploads (upload_fence) or
  // device-link transfers in flight (no-op on the host).
  virtual void synchronize() const {}

  // --- uploads overlapped with compute (segment entries into the memory tier) ---
  // Staging memory for upload_async: page-locked on a device (so the copy engine reads it
  // while the compute stream runs), ordinary memory here by default.
  virtual void* allocate_staging(size_t bytes) const;
  virtual void free_staging(void* ptr) const noexcept;
  // Queues dst (this backend's memory) ← staging[0, bytes) on a transfer stream apart from the
  // compute stream, and returns its ticket (increasing). `staging` must stay unchanged until
  // upload_fence(ticket) returns; deallocate() orders the free after the uploads in flight
  // into that block (and nothing else).
  // Default: a synchronous copy_from_host.
  virtual uint64_t upload_async(void* dst, const void* staging, size_t bytes) const;
  // Returns once the upload `ticket` (and every earlier one) is complete, so its staging
  // memory may be reused and ops queued afterwards may read its destination.
  virtual void upload_fence(uint64_t ticket) const { (void)ticket; }

  // --- dense products (row-major) ---
  // C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C.
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) const = 0;
  // batch products of the same shape, matrix i at a + i·stride_a (b, c likewise).
  virtual void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                    const float* a, int lda, int64_t stride_a, const float* b,
                                    int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                    int64_t stride_c, int batch) const = 0;
  // y[m,n] = x[m,k] · W[n,k]ᵀ (nn.Linear); accumulate: y +=.
  virtual void linear(const float* x, const float* w, float* y, int m, int n, int k,
                      bool accumulate) const = 0;
  // The same with W[n,k] in bf16 (raw bits, row-major), f32 activations and accumulation:
  // weights kept as a bf16 checkpoint stores them (half the memory of f32).
  virtual void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                           bool accumulate) const = 0;
  // y[m,n] = x[m,k] · W[row0 : row0+n, :]ᵀ for a weight tensor [rows, k] of this backend's
  // device, dispatched on its dtype (f32: linear, bf16: linear_bf16). What the layers call;
  // the float* form above stays for code that holds a raw f32 matrix.
  void linear(const float* x, const Tensor& w, float* y, int m, int n, int k, bool accumulate,
              int64_t row0 = 0) const;
  // Products of groups of rows by a weight of their own (a mixture of experts' experts after
  // the tokens are sorted by expert): for every group e < groups,
  //   y[start[e] : start[e+1], 0:n] = x[start[e] : start[e+1], 0:k] · W_eᵀ,  W_e = *w[e],
  // each [n, k] (or taller: its first n rows), of this backend's device, all of one dtype
  // (f32 or bf16). start: a HOST array [groups + 1], ascending; w: a host array of groups
  // pointers (an empty group's may be null). Default: one linear per non-empty group (the
  // host's path, bit for bit what the layers computed before); the CUDA backend runs one grouped
  // cuBLAS product.
  virtual void grouped_linear(const float* x, const Tensor* const* w, const int* start, int groups,
                              float* y, int n, int k) const;
  // Rows [first, m) of linear(x, w, y, m, n, k, accumulate), each bit for bit what the whole
  // product writes there: the last layer of a block carries on only the rows whose logits are
  // read. Rows before `first` may be written as well, from whatever x holds there. Default:
  // the whole product; the host runs only the tiles that hold a row >= first
  // (kernels::linear_from), since a BLAS may round a row differently in a smaller call.
  virtual void linear_from(int first, const float* x, const Tensor& w, float* y, int m, int n,
                           int k, bool accumulate) const;
  // grouped_linear where group e needs only its rows [first[e], start[e+1]) (first: a HOST
  // array [groups], start[e] <= first[e] <= start[e+1]), as linear_from: a group with none
  // left is skipped on the host. Default: the whole grouped product.
  virtual void grouped_linear_from(const int* first, const float* x, const Tensor* const* w,
                                   const int* start, int groups, float* y, int n, int k) const;
  // Whether products with bf16 weights round their f32 activations to bf16 and run on tensor
  // cores (bf16 × bf16, f32 accumulation), and the device wants every projection matrix in
  // bf16 (model::to_backend rounds f32 ones once, at upload). False: products of bf16 weights
  // keep the activations exact (the host; the CUDA backend with HYPIC_CUDA_GEMM=f32).
  virtual bool tensor_core_products() const { return false; }

  // --- data movement ---
  // dst[r, 0:cols] = src[r·src_ld + offset : + cols] for r < rows (a column block).
  virtual void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows,
                            int cols) const = 0;
  // out[i, :] = table[ids[i], :] for i < n (embedding lookup); ids must be in range.
  virtual void gather_rows(const float* table, int cols, const int32_t* ids, int n,
                           float* out) const = 0;
  // The same from a bf16 table (raw bits), widened to f32.
  virtual void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n,
                                float* out) const = 0;
  // From a table tensor [rows, cols] of this backend's device, dispatched on its dtype.
  void gather_rows(const Tensor& table, const int32_t* ids, int n, float* out) const;

  // --- linear-attention family (linear_family.hpp) ---
  virtual void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                              float* state, float* out, float* transition, int chunk) const = 0;
  virtual void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d,
                                      const FamilyInputs& in, float* state, float* out,
                                      float* tdiag, float* x, float* y) const = 0;
  virtual void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d,
                                    const FamilyInputs& in, float* state, float* out) const = 0;

  // --- causal conv1d (conv.hpp) ---
  virtual void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T,
                                  int C, int K) const = 0;
  virtual void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) const = 0;

  // --- norms (norm.hpp) ---
  virtual void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                                     float eps) const = 0;
  virtual void rms_norm(const float* x, const float* w, float* y, int rows, int cols,
                        float eps) const = 0;
  virtual void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows,
                              int cols, float eps) const = 0;
  virtual void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) const = 0;

  // --- rotary embeddings (rope.hpp, linear_family.hpp) ---
  virtual void rope_apply(const RopeDims& d, float* x, int64_t pos0) const = 0;
  virtual void rope_shift(const RopeDims& d, float* x, int64_t delta) const = 0;
  virtual void rotary_rotate_rows(const Rotary& r, float* x, int n, int ld, int dk,
                                  int64_t pos) const = 0;
  virtual void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols,
                                     int64_t pos) const = 0;
  // dst[h] = R_pos · src[h] for every head h of [heads, dk, dv] states (MATH.md §4: a state
  // built with keys at offset 0, moved to offset pos), one launch for all heads. dst may be
  // src; out of place, a resident entry's state stays as stored while a query uses it moved.
  virtual void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk,
                               int dv, int64_t pos) const = 0;

  // --- attention (attention.hpp) ---
  virtual size_t attention_workspace_floats(const AttentionDims& d) const = 0;
  virtual void attention_causal(const AttentionDims& d, const float* q, const float* k,
                                const float* v, float* out, float* work) const = 0;
  virtual void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld) const = 0;

  // --- activations and gates (activation.hpp) ---
  virtual void swiglu(const float* gate_up, float* out, int rows, int width) const = 0;
  virtual void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows,
                                  int cols) const = 0;
  // y[i] = a · x[i] + b · y[i], i < n (b = 0: y only written); y may alias x.
  virtual void axpby(const float* x, float* y, int64_t n, float a, float b) const = 0;
  // x[i] ← x[i] rounded to `dtype` (bf16 or f16: nearest, ties to even, as the segment store
  // encodes) and widened back, i < n; f32 leaves x as it is. A resident entry rounded on the
  // device composes exactly as its stored copy will when read back.
  virtual void round_to_dtype(float* x, int64_t n, DType dtype) const = 0;
  virtual void gdn_gates(const float* b, const float* a, int ld, const float* A_log,
                         const float* dt_bias, float* beta, float* g, int rows,
                         int heads) const = 0;

  // --- mixture of experts (moe.hpp) ---
  // logits [T, E], bias [E] or nullptr, experts/weights [T, k] (moe.hpp: MoeRouteSpec).
  virtual void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T,
                         int* experts, float* weights) const = 0;
  // Groups the T·k (token, slot) pairs by expert: start [E+1] (pairs of expert e are
  // pair_ids[start[e] … start[e+1])), pair_ids [T·k] as t·k + j, tokens ascending; work [E].
  virtual void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids,
                         int* work) const = 0;
  // xe[r, :] = x[pair_ids[r] / k, :] for r < n.
  virtual void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k,
                          float* xe) const = 0;
  // out[pair_ids[r] / k, :] += weights[pair_ids[r]] · ye[r, :] for r < n.
  virtual void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                               const float* weights, float* out) const = 0;
  // Every expert's rows at once: out[t, :] += Σ_j weights[t·k + j] · ye[row(t·k + j), :] for
  // t < T, row(p) the place of pair p in pair_ids [T·k] (every pair once, as moe_group
  // leaves them), the k terms of a token added in ascending row order, i.e. in expert order:
  // the same sums as moe_scatter_add called per expert in ascending order. work: [T·k] ints.
  virtual void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                           const float* weights, float* out, int* work) const = 0;

  // --- T·S composition (MATH.md §2) ---
  // For every summary i and head h: states[i][h] ← T_i,h · states[i][h] + S0_i,h (addition:
  // states[i][h] + S0_i,h), all layers and heads in one parallel launch. `sums` and `states`
  // are host arrays of n entries; the arrays they point to are the backend's memory.
  virtual void compose_states(const TransitionRef* sums, float* const* states, int n,
                              bool addition) const = 0;

 protected:
  // Throws "the <name> backend lacks <op> ..." (for ops a backend does not implement yet).
  [[noreturn]] void lacks(Op op) const;
};

// The host backend (always available).
const Backend& host_backend();
// The CUDA backend; throws hypic::Error "hypic was not compiled with CUDA ..." in a build
// without CUDA. Computing needs a visible GPU (cuda_device_info()).
const Backend& cuda_backend();
// The backend computing on `device`.
const Backend& backend_for(Device device);

}  // namespace hypic::kernels
