#pragma once
// A stand-in device for the tests: a backend that reports Device::Cuda but keeps its "device
// memory" in host memory and runs the host kernels. Everything the CUDA backend does with
// memory (uploads, device caches, resident entries, the transfer stream's tickets) then runs on
// any machine; results must equal the host backend's bit for bit (device_plumbing_test.cpp),
// and HYPIC_TEST_DEVICE=fake runs the PIC tests on it (pic_test_util.hpp) to check that the
// tests themselves read device tensors correctly before they meet a GPU.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <vector>

#include "hypic/kernels/backend.hpp"

namespace pic_test {
namespace kn = hypic::kernels;
using hypic::Device;

class HostMemoryDevice : public kn::Backend {
 public:
  const char* name() const override { return "host-memory-device"; }
  Device device() const override { return Device::Cuda; }
  bool supports(kn::Op) const override { return true; }
  void* allocate(size_t bytes) const override {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    sizes[p] = bytes;
    ++allocations;
    return p;
  }
  // Waits only for uploads into the freed block (cudaFree waits for all): a fence missing
  // elsewhere must not be hidden by an unrelated free.
  void deallocate(void* p) const noexcept override {
    const auto it = sizes.find(p);
    if (it != sizes.end()) {
      const auto* lo = static_cast<const unsigned char*>(p);
      for (size_t i = 0; i < pending.size(); ++i) {
        const auto* d = static_cast<const unsigned char*>(pending[i].dst);
        if (d >= lo && d < lo + it->second && base + i + 1 > fenced) upload_fence(base + i + 1);
      }
      sizes.erase(it);
    }
    std::free(p);
  }
  void copy_to_host(void* d, const void* s, size_t n) const override { std::memcpy(d, s, n); }
  void copy_from_host(void* d, const void* s, size_t n) const override {
    host_to_device += n;
    std::memcpy(d, s, n);
  }
  void copy_within(void* d, const void* s, size_t n) const override { std::memmove(d, s, n); }
  // The transfer stream: tickets complete in order, each at its fence (a copy done at the
  // fence, not before, so a splice that read before its fence would see garbage).
  uint64_t upload_async(void* d, const void* s, size_t n) const override {
    uploaded += n;
    pending.push_back({d, s, n});
    return ++tickets;
  }
  void upload_fence(uint64_t ticket) const override {
    while (fenced < ticket) {
      const Pending& p = pending.at(fenced - base);
      std::memcpy(p.dst, p.src, p.bytes);
      ++fenced;
    }
    if (fenced == tickets) {
      base = tickets;
      pending.clear();
    }
  }
  mutable uint64_t host_to_device = 0;  // bytes through copy_from_host
  mutable uint64_t uploaded = 0;        // bytes through upload_async
  mutable uint64_t allocations = 0;     // calls of allocate()

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) const override {
    h().gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void gemm_strided_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                            int lda, int64_t sa, const float* b, int ldb, int64_t sb, float beta,
                            float* c, int ldc, int64_t sc, int batch) const override {
    h().gemm_strided_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                             batch);
  }
  void linear(const float* x, const float* w, float* y, int m, int n, int k,
              bool acc) const override {
    h().linear(x, w, y, m, n, k, acc);
  }
  void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                   bool acc) const override {
    h().linear_bf16(x, w, y, m, n, k, acc);
  }
  void gather_rows_bf16(const uint16_t* t, int c, const int32_t* ids, int n,
                        float* o) const override {
    h().gather_rows_bf16(t, c, ids, n, o);
  }
  void copy_strided(const float* s, int ld, int off, float* d, int r, int c) const override {
    h().copy_strided(s, ld, off, d, r, c);
  }
  void gather_rows(const float* t, int c, const int32_t* ids, int n, float* o) const override {
    h().gather_rows(t, c, ids, n, o);
  }
  void family_chunked(const kn::FamilySpec& s, const kn::FamilyDims& d, const kn::FamilyInputs& in,
                      float* st, float* o, float* tr, int chunk) const override {
    h().family_chunked(s, d, in, st, o, tr, chunk);
  }
  void family_chunked_lowrank(const kn::FamilySpec& s, const kn::FamilyDims& d,
                              const kn::FamilyInputs& in, float* st, float* o, float* td, float* x,
                              float* y) const override {
    h().family_chunked_lowrank(s, d, in, st, o, td, x, y);
  }
  void family_recurrent_f32(const kn::FamilySpec& s, const kn::FamilyDims& d,
                            const kn::FamilyInputs& in, float* st, float* o) const override {
    h().family_recurrent_f32(s, d, in, st, o);
  }
  void causal_conv1d_silu(const float* x, const float* w, float* st, float* y, int T, int C,
                          int K) const override {
    h().causal_conv1d_silu(x, w, st, y, T, C, K);
  }
  void causal_conv1d_tail(const float* x, float* st, int T, int C, int K) const override {
    h().causal_conv1d_tail(x, st, T, C, K);
  }
  void rms_norm_zero_centred(const float* x, const float* w, float* y, int r, int c,
                             float eps) const override {
    h().rms_norm_zero_centred(x, w, y, r, c, eps);
  }
  void rms_norm(const float* x, const float* w, float* y, int r, int c, float eps) const override {
    h().rms_norm(x, w, y, r, c, eps);
  }
  void axpby(const float* x, float* y, int64_t n, float a, float b) const override {
    h().axpby(x, y, n, a, b);
  }
  void round_to_dtype(float* x, int64_t n, hypic::DType dt) const override {
    h().round_to_dtype(x, n, dt);
  }
  void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int r, int c,
                      float eps) const override {
    h().gated_rms_norm(x, z, w, y, r, c, eps);
  }
  void l2_normalize_rows(float* x, int r, int c, float eps, float scale) const override {
    h().l2_normalize_rows(x, r, c, eps, scale);
  }
  void rope_apply(const kn::RopeDims& d, float* x, int64_t p) const override {
    h().rope_apply(d, x, p);
  }
  void rope_shift(const kn::RopeDims& d, float* x, int64_t p) const override {
    h().rope_shift(d, x, p);
  }
  void rotary_rotate_rows(const kn::Rotary& r, float* x, int n, int ld, int dk,
                          int64_t p) const override {
    h().rotary_rotate_rows(r, x, n, ld, dk, p);
  }
  void rotary_rotate_columns(const kn::Rotary& r, float* m, int dk, int c,
                             int64_t p) const override {
    h().rotary_rotate_columns(r, m, dk, c, p);
  }
  void rerotate_states(const kn::Rotary& r, const float* s, float* d, int hh, int dk, int dv,
                       int64_t p) const override {
    h().rerotate_states(r, s, d, hh, dk, dv, p);
  }
  size_t attention_workspace_floats(const kn::AttentionDims& d) const override {
    return h().attention_workspace_floats(d);
  }
  void attention_causal(const kn::AttentionDims& d, const float* q, const float* k, const float* v,
                        float* o, float* w) const override {
    h().attention_causal(d, q, k, v, o, w);
  }
  void sigmoid_gate(float* x, const float* g, int r, int c, int ld) const override {
    h().sigmoid_gate(x, g, r, c, ld);
  }
  void swiglu(const float* gu, float* o, int r, int w) const override { h().swiglu(gu, o, r, w); }
  void add_sigmoid_scaled(float* x, const float* y, const float* l, int r, int c) const override {
    h().add_sigmoid_scaled(x, y, l, r, c);
  }
  void gdn_gates(const float* b, const float* a, int ld, const float* A, const float* dt,
                 float* beta, float* g, int r, int hh) const override {
    h().gdn_gates(b, a, ld, A, dt, beta, g, r, hh);
  }
  void moe_route(const hypic::kernels::MoeRouteSpec& s, const float* l, const float* b, int T,
                 int* e, float* w) const override {
    h().moe_route(s, l, b, T, e, w);
  }
  void moe_group(const int* e, int T, int k, int E, int* s, int* p, int* w) const override {
    h().moe_group(e, T, k, E, s, p, w);
  }
  void moe_gather(const float* x, int hid, const int* p, int n, int k, float* xe) const override {
    h().moe_gather(x, hid, p, n, k, xe);
  }
  void moe_scatter_add(const float* ye, int hid, const int* p, int n, int k, const float* w,
                       float* o) const override {
    h().moe_scatter_add(ye, hid, p, n, k, w, o);
  }
  void moe_combine(const float* ye, int hid, const int* p, int T, int k, const float* w, float* o,
                   int* work) const override {
    h().moe_combine(ye, hid, p, T, k, w, o, work);
  }
  // grouped_linear: the Backend default (one linear per group through this backend, whose
  // weights are "device" tensors the host backend would refuse).
  void compose_states(const kn::TransitionRef* s, float* const* st, int n,
                      bool add) const override {
    h().compose_states(s, st, n, add);
  }

 private:
  static const kn::Backend& h() { return kn::host_backend(); }
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
  };
  mutable std::vector<Pending> pending;   // tickets base+1 … tickets, not yet copied
  mutable std::map<void*, size_t> sizes;  // live allocations
  mutable uint64_t tickets = 0, fenced = 0, base = 0;
};

inline const HostMemoryDevice& fake_device() {
  static const HostMemoryDevice d;
  return d;
}

}  // namespace pic_test
