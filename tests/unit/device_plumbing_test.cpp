// The device data path, checked on any machine: a stand-in backend that reports Device::Cuda
// but keeps its "device memory" in host memory and runs the host kernels. Everything the CUDA
// backend's forward pass and PIC path do with memory (weights uploaded, caches, scratch and
// K/V appends in device memory, ids up and logits down, MoE list offsets down, entries
// downloaded after their prefill, entries uploaded and composed into a device cache, prefix
// snapshots copied within the device) then runs here, and must give exactly the host
// backend's results: the kernels are the same, only the memory bookkeeping differs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/forward.hpp"
#include "pic/compose.hpp"
#include "pic/engine.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"

namespace {
namespace kn = hypic::kernels;
namespace model = hypic::model;
using hypic::Device;
using hypic::Tensor;

class HostMemoryDevice final : public kn::Backend {
 public:
  const char* name() const override { return "host-memory-device"; }
  Device device() const override { return Device::Cuda; }
  bool supports(kn::Op) const override { return true; }
  void* allocate(size_t bytes) const override {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p) const noexcept override { std::free(p); }
  void copy_to_host(void* d, const void* s, size_t n) const override { std::memcpy(d, s, n); }
  void copy_from_host(void* d, const void* s, size_t n) const override { std::memcpy(d, s, n); }
  void copy_within(void* d, const void* s, size_t n) const override { std::memmove(d, s, n); }

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
  void copy_strided(const float* s, int ld, int off, float* d, int r, int c) const override {
    h().copy_strided(s, ld, off, d, r, c);
  }
  void gather_rows(const float* t, int c, const int32_t* ids, int n, float* o) const override {
    h().gather_rows(t, c, ids, n, o);
  }
  void gather_rows_bf16(const uint16_t* t, int c, const int32_t* ids, int n,
                        float* o) const override {
    h().gather_rows_bf16(t, c, ids, n, o);
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
  void moe_route(const float* l, int T, int E, int k, bool norm, int* e, float* w) const override {
    h().moe_route(l, T, E, k, norm, e, w);
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
  void compose_states(const kn::TransitionRef* s, float* const* st, int n,
                      bool add) const override {
    h().compose_states(s, st, n, add);
  }

 private:
  static const kn::Backend& h() { return kn::host_backend(); }
};

const HostMemoryDevice& fake_device() {
  static const HostMemoryDevice d;
  return d;
}

model::Model on_fake_device(const model::Model& m) {
  return model::Model(m.config(), model::to_backend(m.weights(), fake_device()), fake_device());
}

TEST(DevicePlumbing, ForwardOnADeviceCacheEqualsTheHostsExactly) {
  for (const std::string arch : {"qwen3_5", "qwen3_next"}) {  // qwen3_next: MoE on the device
    model::Model host = pic_test::remembering_tiny_model(arch, 3);
    model::Model dev = on_fake_device(host);
    host.set_max_block_tokens(64);
    dev.set_max_block_tokens(64);
    std::mt19937 rng(2);
    const auto ids = pic_test::random_tokens(rng, 150, host.config().vocab_size);
    auto hc = host.new_cache();
    auto dc = dev.new_cache();
    for (const model::LayerCache& lc : dc.layers)
      EXPECT_EQ((lc.kind == model::LayerKind::Linear ? lc.state : lc.k).device(), Device::Cuda);
    EXPECT_EQ(dev.prefill(ids, dc, model::LogitsMode::All).to_vector(),
              host.prefill(ids, hc, model::LogitsMode::All).to_vector())
        << arch;
    for (int32_t t : {5, 17})
      EXPECT_EQ(dev.decode_step(t, dc).to_vector(), host.decode_step(t, hc).to_vector()) << arch;
    EXPECT_EQ(dev.last_hidden(), host.last_hidden());
    auto refused = model::InferenceCache::empty(host.config());
    EXPECT_THROW(dev.prefill(ids, refused, model::LogitsMode::Last), hypic::Error);
  }
}

TEST(DevicePlumbing, EntriesComputedAndSplicedOnADeviceEqualTheHosts) {
  model::Model host = pic_test::remembering_tiny_model("qwen3_5", 7);
  model::Model dev = on_fake_device(host);
  std::mt19937 rng(11);
  const int V = host.config().vocab_size;
  const std::vector<std::vector<int32_t>> segs = {pic_test::random_tokens(rng, 40, V),
                                                  pic_test::random_tokens(rng, 70, V)};
  for (bool addition : {false, true}) {
    model::InferenceCache caches[2] = {host.new_cache(), dev.new_cache()};
    model::Model* models[2] = {&host, &dev};
    for (int i = 0; i < 2; ++i) {
      for (const auto& s : segs) {
        const hypic::pic::SegmentEntry e = hypic::pic::compute_entry(*models[i], s, 8);
        for (const auto& l : e.linear) EXPECT_EQ(l.conv.device(), Device::Host);
        hypic::pic::compose_segments(*models[i], {{&s, &e}}, addition, caches[i]);
      }
    }
    for (size_t l = 0; l < caches[0].layers.size(); ++l) {
      const model::LayerCache &a = caches[0].layers[l], &b = caches[1].layers[l];
      for (const auto& [x, y] : {std::pair{&a.state, &b.state}, std::pair{&a.conv, &b.conv},
                                 std::pair{&a.k, &b.k}, std::pair{&a.v, &b.v}})
        if (x->rank() > 0) {
          EXPECT_EQ(y->to_vector(), x->to_vector()) << "layer " << l;
        }
    }
  }
}

TEST(DevicePlumbing, EngineModesOnADeviceAnswerAsOnTheHost) {
  model::Model host = pic_test::remembering_tiny_model("qwen3_5", 5);
  model::Model dev = on_fake_device(host);
  std::mt19937 rng(4);
  const int V = host.config().vocab_size;
  hypic::pic::Query q;
  q.id = "q";
  q.segments = {pic_test::random_tokens(rng, 30, V), pic_test::random_tokens(rng, 50, V)};
  q.question = pic_test::random_tokens(rng, 6, V);
  q.max_new_tokens = 4;
  for (hypic::pic::Mode mode :
       {hypic::pic::Mode::Full, hypic::pic::Mode::Prefix, hypic::pic::Mode::Pic}) {
    hypic::pic::EngineOptions o;
    o.mode = mode;
    o.junction = hypic::pic::JunctionSpec::parse("8");
    o.keep_first_logits = true;
    hypic::pic::Engine eh(host, "fp", o), ed(dev, "fp", o);
    for (int rep = 0; rep < 2; ++rep) {  // the second query hits the memory tier / snapshots
      const hypic::pic::QueryResult rh = eh.run(q), rd = ed.run(q);
      EXPECT_EQ(rd.answer, rh.answer) << hypic::pic::mode_name(mode) << " query " << rep;
      EXPECT_EQ(rd.first_logits, rh.first_logits) << hypic::pic::mode_name(mode);
    }
  }
}

}  // namespace
