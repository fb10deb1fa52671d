#pragma once
// The CUDA backend's kernels (device pointers throughout), behind cuda_backend(). Each takes
// the arguments of the Backend op of the same name (backend.hpp documents the layouts) and
// queues its work on the compute stream (the legacy default stream).
#include <cublas_v2.h>

#include <cstdint>

#include "hypic/kernels/attention.hpp"
#include "hypic/kernels/compose.hpp"
#include "hypic/kernels/linear_family.hpp"
#include "hypic/kernels/moe.hpp"
#include "hypic/kernels/rope.hpp"
#include "hypic/tensor.hpp"

namespace hypic::kernels::cuda {

// --- device.cu ---
// Sets the current device's stream-ordered pool to keep freed memory mapped
// (cudaMemPoolAttrReleaseThreshold = UINT64_MAX): scratch is not unmapped at every sync.
void keep_pool_mapped();

// --- gemm.cu: cuBLAS (one handle per host thread, on the compute stream) ---
cublasHandle_t cublas_handle();
// --- gemm.cu: cuBLAS (row-major through column-major: C = A·B is Cᵀ = Bᵀ·Aᵀ) ---
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch);
// y[m,n] (+)= x[m,k] · W[n,k]ᵀ with W in bf16 (see gemm.cu).
void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k, bool accumulate);
// Backend::grouped_linear with bf16 weights on tensor cores (one grouped cuBLAS call; see
// gemm.cu); w: host array of `groups` device pointers, start: host array [groups + 1].
void grouped_linear_bf16(const float* x, const uint16_t* const* w, const int* start, int groups,
                         float* y, int n, int k);

// --- elementwise.cu: copies, gathers, activations and gates ---
void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows, int cols);
void gather_rows(const float* table, int cols, const int32_t* ids, int n, float* out);
void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n, float* out);
void swiglu(const float* gate_up, float* out, int rows, int width);
void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld);
void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows, int cols);
void round_to_dtype(float* x, int64_t n, DType dtype);
void axpby(const float* x, float* y, int64_t n, float a, float b);
void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
               float* beta, float* g, int rows, int heads);

// --- norm.cu: one block per row ---
void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols, float eps);
void rms_norm(const float* x, const float* w, float* y, int rows, int cols, float eps);
void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                    float eps);
void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale);

// --- conv.cu ---
void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                        int K);
void causal_conv1d_tail(const float* x, float* state, int T, int C, int K);

// --- rope.cu ---
void rope_apply(const RopeDims& d, float* x, int64_t pos0);
void rope_shift(const RopeDims& d, float* x, int64_t delta);
void rotary_rotate_rows(const Rotary& r, float* x, int n, int ld, int dk, int64_t pos);
void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols, int64_t pos);
void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                     int64_t pos);

// --- attention.cu: the steps of attention_plan.hpp as strided-batched cuBLAS products (bf16
// on tensor cores, or f32 with HYPIC_CUDA_GEMM=f32) and a softmax kernel; pool scratch ---
void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out);

// --- family.cu: the linear-attention family (chunked: the steps of family_plan.hpp; the token
// recurrence: one block per value head) ---
void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in, float* state,
                    float* out, float* transition, int chunk);
void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* tdiag, float* x, float* y);
void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                          float* state, float* out);

// --- moe.cu ---
void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
               float* weights);
void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids, int* work);
void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k, float* xe);
void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                     const float* weights, float* out);
void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                 const float* weights, float* out, int* work);

// --- compose.cu: T·S + S0 as batched products per layer ---
void compose_states(const TransitionRef* sums, float* const* states, int n, bool addition);

}  // namespace hypic::kernels::cuda
