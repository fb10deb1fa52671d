// The host backend: every op forwards to the host kernel of the same name (kernels/host/*.cpp),
// memory is ordinary host memory.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "hypic/kernels/activation.hpp"
#include "hypic/kernels/attention.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/compose.hpp"
#include "hypic/kernels/conv.hpp"
#include "hypic/kernels/copy.hpp"
#include "hypic/kernels/moe.hpp"
#include "hypic/kernels/norm.hpp"
#include "hypic/kernels/rope.hpp"

namespace hypic::kernels {
namespace {

class HostBackend final : public Backend {
 public:
  const char* name() const override { return "host"; }
  Device device() const override { return Device::Host; }
  bool supports(Op) const override { return true; }

  void* allocate(size_t bytes) const override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);  // cache-line aligned for SIMD
    if (p == nullptr && bytes > 0) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* ptr) const noexcept override { std::free(ptr); }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    std::memcpy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) const override {
    std::memcpy(dst, src, bytes);
  }
  void copy_within(void* dst, const void* src, size_t bytes) const override {
    std::memmove(dst, src, bytes);
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) const override {
    kernels::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_strided_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                            int lda, int64_t sa, const float* b, int ldb, int64_t sb, float beta,
                            float* c, int ldc, int64_t sc, int batch) const override {
    for (int i = 0; i < batch; ++i)
      kernels::gemm(ta, tb, m, n, k, alpha, a + sa * i, lda, b + sb * i, ldb, beta, c + sc * i,
                    ldc);
  }
  void linear(const float* x, const float* w, float* y, int m, int n, int k,
              bool accumulate) const override {
    kernels::linear(x, w, y, m, n, k, accumulate);
  }
  void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                   bool accumulate) const override {
    kernels::linear_bf16(x, w, y, m, n, k, accumulate);
  }

  void linear_from(int first, const float* x, const Tensor& w, float* y, int m, int n, int k,
                   bool accumulate) const override {
    if (first <= 0) return Backend::linear(x, w, y, m, n, k, accumulate);
    HYPIC_REQUIRE(
        w.device() == Device::Host && (w.dtype() == DType::F32 || w.dtype() == DType::BF16),
        "linear: the weight must be f32 or bf16 host memory");
    HYPIC_REQUIRE(w.rank() == 2 && w.dim(1) == k && n <= w.dim(0),
                  "linear: " + std::to_string(n) + " rows of " + std::to_string(k) +
                      " columns do not fit a weight of shape " + w.shape_str());
    if (w.dtype() == DType::BF16)
      kernels::linear_bf16_from(Bf16Gemm::Auto, first, x, static_cast<const uint16_t*>(w.raw()), y,
                                m, n, k, accumulate);
    else
      kernels::linear_from(first, x, static_cast<const float*>(w.raw()), y, m, n, k, accumulate);
  }
  void grouped_linear_from(const int* first, const float* x, const Tensor* const* w,
                           const int* start, int groups, float* y, int n, int k) const override {
    for (int e = 0; e < groups; ++e) {
      const int rows = start[e + 1] - start[e];
      HYPIC_REQUIRE(rows >= 0 && first[e] >= start[e] && first[e] <= start[e + 1],
                    "grouped_linear: group starts must ascend and hold their first rows");
      if (first[e] == start[e + 1]) continue;  // nothing of this group is needed
      HYPIC_REQUIRE(w[e] != nullptr, "grouped_linear: a non-empty group without a weight");
      const size_t r0 = static_cast<size_t>(start[e]);
      linear_from(first[e] - start[e], x + r0 * static_cast<size_t>(k), *w[e],
                  y + r0 * static_cast<size_t>(n), rows, n, k, false);
    }
  }

  void copy_strided(const float* src, int src_ld, int offset, float* dst, int rows,
                    int cols) const override {
    kernels::copy_strided(src, src_ld, offset, dst, rows, cols);
  }
  void gather_rows(const float* table, int cols, const int32_t* ids, int n,
                   float* out) const override {
    kernels::gather_rows(table, cols, ids, n, out);
  }
  void gather_rows_bf16(const uint16_t* table, int cols, const int32_t* ids, int n,
                        float* out) const override {
    kernels::gather_rows_bf16(table, cols, ids, n, out);
  }

  void family_chunked(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                      float* state, float* out, float* transition, int chunk) const override {
    kernels::family_chunked(s, d, in, state, out, transition, chunk);
  }
  void family_chunked_lowrank(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                              float* state, float* out, float* tdiag, float* x,
                              float* y) const override {
    kernels::family_chunked_lowrank(s, d, in, state, out, tdiag, x, y);
  }
  void family_recurrent_f32(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out) const override {
    kernels::family_recurrent_f32(s, d, in, state, out);
  }

  void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                          int K) const override {
    kernels::causal_conv1d_silu(x, w, state, y, T, C, K);
  }
  void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) const override {
    kernels::causal_conv1d_tail(x, state, T, C, K);
  }

  void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                             float eps) const override {
    kernels::rms_norm_zero_centred(x, w, y, rows, cols, eps);
  }
  void rms_norm(const float* x, const float* w, float* y, int rows, int cols,
                float eps) const override {
    kernels::rms_norm(x, w, y, rows, cols, eps);
  }
  void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                      float eps) const override {
    kernels::gated_rms_norm(x, z, w, y, rows, cols, eps);
  }
  void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) const override {
    kernels::l2_normalize_rows(x, rows, cols, eps, scale);
  }

  void rope_apply(const RopeDims& d, float* x, int64_t pos0) const override {
    kernels::rope_apply(d, x, pos0);
  }
  void rope_shift(const RopeDims& d, float* x, int64_t delta) const override {
    kernels::rope_shift(d, x, delta);
  }
  void rotary_rotate_rows(const Rotary& r, float* x, int n, int ld, int dk,
                          int64_t pos) const override {
    kernels::rotary_rotate(r, x, n, ld, dk, pos);
  }
  void rotary_rotate_columns(const Rotary& r, float* m, int dk, int cols,
                             int64_t pos) const override {
    kernels::rotary_rotate_columns(r, m, dk, cols, pos);
  }
  void rerotate_states(const Rotary& r, const float* src, float* dst, int heads, int dk, int dv,
                       int64_t pos) const override {
    kernels::rerotate_states(r, src, dst, heads, dk, dv, pos);
  }

  size_t attention_workspace_floats(const AttentionDims& d) const override {
    return kernels::attention_workspace_floats(d);
  }
  void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                        float* out, float* work) const override {
    kernels::attention_causal(d, q, k, v, out, work);
  }
  void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld) const override {
    kernels::sigmoid_gate(x, gate, rows, cols, gate_ld);
  }

  void swiglu(const float* gate_up, float* out, int rows, int width) const override {
    kernels::swiglu(gate_up, out, rows, width);
  }
  void axpby(const float* x, float* y, int64_t n, float a, float b) const override {
    kernels::axpby(x, y, n, a, b);
  }
  void round_to_dtype(float* x, int64_t n, DType dtype) const override {
    kernels::round_to_dtype(x, n, dtype);
  }
  void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows,
                          int cols) const override {
    kernels::add_sigmoid_scaled(x, y, logit, rows, cols);
  }
  void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
                 float* beta, float* g, int rows, int heads) const override {
    kernels::gdn_gates(b, a, ld, A_log, dt_bias, beta, g, rows, heads);
  }

  void moe_route(const MoeRouteSpec& s, const float* logits, const float* bias, int T, int* experts,
                 float* weights) const override {
    kernels::moe_route(s, logits, bias, T, experts, weights);
  }
  void moe_group(const int* experts, int T, int k, int E, int* start, int* pair_ids,
                 int* work) const override {
    kernels::moe_group(experts, T, k, E, start, pair_ids, work);
  }
  void moe_gather(const float* x, int hidden, const int* pair_ids, int n, int k,
                  float* xe) const override {
    kernels::moe_gather(x, hidden, pair_ids, n, k, xe);
  }
  void moe_scatter_add(const float* ye, int hidden, const int* pair_ids, int n, int k,
                       const float* weights, float* out) const override {
    kernels::moe_scatter_add(ye, hidden, pair_ids, n, k, weights, out);
  }
  void moe_combine(const float* ye, int hidden, const int* pair_ids, int T, int k,
                   const float* weights, float* out, int* work) const override {
    kernels::moe_combine(ye, hidden, pair_ids, T, k, weights, out, work);
  }

  void compose_states(const TransitionRef* sums, float* const* states, int n,
                      bool addition) const override {
    kernels::compose_states(sums, states, n, addition);
  }
};

}  // namespace

const Backend& host_backend() {
  static const HostBackend backend;
  return backend;
}

}  // namespace hypic::kernels
