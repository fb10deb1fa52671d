// The op harness (in the spirit of ggml's test-backend-ops): every op of kernels::Backend over a
// grid of shapes (odd sizes, GQA ratios 1/2/4, chunk boundaries 63/64/65, head dims 48/80/96,
// rotary_dim < head_dim), on each backend (host; cuda when compiled and a GPU is visible),
// against the plain double-precision references of op_reference.hpp. An op a backend lacks is
// skipped with that reason. Tolerances: one table, kTolerances below. Dtype axis: every op in
// f32 on every backend; the products also in bf16 (f32 accumulation) on cuda.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/device.hpp"
#include "hypic/kernels/threads.hpp"
#include "hypic/tensor.hpp"
#include "op_reference.hpp"
#include "store/entry.hpp"

namespace {
namespace backend_ops_test {
using hypic::Device;
using hypic::DType;
using hypic::Tensor;
using hypic::kernels::Backend;
using hypic::kernels::Op;

using hypic::ref::randn;
using hypic::ref::uniform;
using hypic::ref::Vec;
namespace kn = hypic::kernels;
namespace ref = hypic::ref;

// Max |got − ref| / max(1, max |ref|) allowed per op: float kernels against double references.
// Exact ops (copies, routing bookkeeping) allow nothing.
struct Tolerance {
  Op op;
  double tol;
  const char* why;
};
constexpr Tolerance kTolerances[] = {
    {Op::Gemm, 1e-5, "f32 products of up to 130 terms"},
    {Op::GemmStridedBatched, 1e-5, "as gemm"},
    {Op::Linear, 1e-5, "as gemm"},
    {Op::LinearBf16, 1e-5,
     "exact bf16 weights; activations as f32 (convert) or three bf16 terms (exact, dot3)"},
    {Op::CopyStrided, 0.0, "a copy"},
    {Op::GatherRows, 0.0, "a copy"},
    {Op::GatherRowsBf16, 0.0, "an exact widening copy"},
    {Op::FamilyChunked, 2e-5, "chunked WY form in f32 vs the token recurrence in double"},
    {Op::FamilyChunkedLowRank, 2e-5, "as family_chunked"},
    {Op::FamilyRecurrentF32, 1e-5, "the same recurrence in f32"},
    {Op::CausalConv1dSilu, 1e-6, "K-term sums"},
    {Op::CausalConv1dTail, 0.0, "a copy"},
    {Op::RmsNormZeroCentred, 1e-6, "one f32 reduction per row"},
    {Op::RmsNorm, 1e-6, "one f32 reduction per row"},
    {Op::GatedRmsNorm, 1e-6, "as rms_norm"},
    {Op::L2NormalizeRows, 1e-6, "as rms_norm"},
    {Op::RopeApply, 1e-4, "angles pos · inv_freq formed in f32 as transformers does: ~pos·2^-24"},
    {Op::RopeShift, 1e-6, "double angles, one f32 rotation"},
    {Op::RotaryRotateRows, 1e-6, "as rope_shift"},
    {Op::RotaryRotateColumns, 1e-6, "as rope_shift"},
    {Op::RerotateStates, 1e-6, "as rope_shift"},
    {Op::AttentionCausal, 1e-5, "f32 softmax with a polynomial exp"},
    {Op::SigmoidGate, 1e-6, "element-wise"},
    {Op::Swiglu, 1e-6, "element-wise"},
    {Op::AddSigmoidScaled, 1e-6, "element-wise"},
    {Op::GdnGates, 1e-6, "element-wise"},
    {Op::MoeRoute, 1e-6, "softmax or sigmoid weights; experts must match exactly"},
    {Op::MoeGroup, 0.0, "integer bookkeeping"},
    {Op::MoeGather, 0.0, "a copy"},
    {Op::MoeScatterAdd, 1e-6, "one multiply-add per element"},
    {Op::MoeCombine, 1e-6, "k multiply-adds per element"},
    {Op::GroupedLinear, 1e-5,
     "as linear (exact mode); on tensor cores the bf16 bound of expect_within_bf16_bound"},
    {Op::ComposeStates, 1e-5, "dk-term f32 products"},
    {Op::Axpby, 1e-6, "element-wise"},
    {Op::RoundToDtype, 0.0, "exact: the store's own rounding"},
};

double tolerance(Op op) {
  for (const Tolerance& t : kTolerances)
    if (t.op == op) return t.tol;
  ADD_FAILURE() << "no tolerance for " << kn::op_name(op);
  return 0.0;
}

// The linear-attention family on tensor cores (the steps of family_plan.hpp with bf16 operands
// and f32 accumulation) against the double recurrence, relative as kTolerances: the bound
// FamilyPlan.Bf16OperandsStayWithinTheTensorCoreBound holds the same steps, emulated on the
// CPU, to (measured there: 2.1e-3 to 6.8e-3 over the awkward shapes of every member).
constexpr double kFamilyBf16Tolerance = 2e-2;

// max |got − ref| / max(1, max |ref|); tol < 0: the op's entry in kTolerances.
void expect_close(const Vec& got, const Vec& want, Op op, const std::string& where,
                  double tol = -1.0) {
  ASSERT_EQ(got.size(), want.size()) << kn::op_name(op) << " " << where;
  double scale = 1.0, err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (!(e <= err)) {  // also catches NaN
      err = e;
      worst = i;
    }
  }
  EXPECT_LE(err / scale, tol < 0 ? tolerance(op) : tol)
      << kn::op_name(op) << " " << where << ": worst element " << worst << " got "
      << (got.empty() ? 0.0f : got[worst]) << " want " << (want.empty() ? 0.0f : want[worst]);
}

// Products on tensor cores (Backend::tensor_core_products(): activations rounded once to bf16,
// bf16 weights, f32 accumulation) against the double reference on the same bf16 weights. With
// u = 2⁻⁸ bf16's unit roundoff (|x̂ − x| ≤ u·|x|; x̂·w is exact in f32: 8 × 8 significant bits)
// and γ = (k + 2)·2⁻²³ a bound for any order of k f32 additions plus the β·y term and the
// reference's own rounding to f32 (2⁻²⁴ each, doubled for slack), each element obeys
//   |got − ref| ≤ (u + γ) · (Σ_p |x_p|·|w_p| + |β·y_old|),
// whatever summation order cuBLAS picks (split-K included): a worst-case bound, not a
// statistical one. `mag` is the bracket, computed by the caller with the same reference on
// |x|, |w| and |y_old|.
void expect_within_bf16_bound(const Vec& got, const Vec& want, const Vec& mag, int k,
                              const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  ASSERT_EQ(mag.size(), want.size()) << where;
  const double u = std::ldexp(1.0, -8), gamma = (k + 2) * std::ldexp(1.0, -23);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = (u + gamma) * double(mag[i]);
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (!(e <= bound) && ++bad <= 3)
      ADD_FAILURE() << where << ": element " << i << " got " << got[i] << " want " << want[i]
                    << " error " << e << " over the bf16 bound " << bound;
  }
  EXPECT_EQ(bad, 0) << where;
}
Vec abs_of(Vec v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

uint16_t round_bf16(float x) {  // nearest, ties to even (inputs here are finite)
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(x));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float widen_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
// A host bf16 tensor [rows, cols] of `values` rounded, and those rounded values as f32.
Tensor bf16_matrix(const Vec& values, int64_t rows, int64_t cols, Vec* rounded) {
  Tensor t({rows, cols}, DType::BF16, Device::Host);
  auto* p = static_cast<uint16_t*>(t.raw());
  rounded->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    p[i] = round_bf16(values[i]);
    (*rounded)[i] = widen_bf16(p[i]);
  }
  return t;
}

// The backend under test, by name; cuda is skipped with the reason when it cannot run here.
class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "host") {
      be_ = &kn::host_backend();
      return;
    }
    const kn::DeviceInfo info = kn::cuda_device_info();
    if (!info.compiled) GTEST_SKIP() << "cuda backend: built without CUDA (-DHYPIC_CUDA=OFF)";
    if (info.count == 0)
      GTEST_SKIP() << "cuda backend: no CUDA device visible (" << info.description << ")";
    // A sticky fault in an earlier case lost the context: every later case would fail with it.
    if (!kn::cuda::sticky_fault().empty())
      GTEST_SKIP() << "cuda backend: stopped, the CUDA context was lost at "
                   << kn::cuda::sticky_fault();
    be_ = &kn::cuda_backend();
  }
  const Backend& be() const { return *be_; }

  // Buffers in the backend's memory, filled from host vectors, read back as host vectors.
  float* put(const Vec& h) {
    Tensor t = Tensor::from_vector({static_cast<int64_t>(h.size())}, h);
    if (be().device() != Device::Host) t = t.to(be().device(), be_);
    held_.push_back(std::move(t));
    return static_cast<float*>(held_.back().raw());
  }
  int* put_ints(const std::vector<int>& h) {
    Tensor t({static_cast<int64_t>(h.size())}, DType::I32, Device::Host);
    if (!h.empty()) std::memcpy(t.raw(), h.data(), h.size() * sizeof(int));
    if (be().device() != Device::Host) t = t.to(be().device(), be_);
    held_.push_back(std::move(t));
    return static_cast<int*>(held_.back().raw());
  }
  Vec get(const float* p, size_t n) const {
    Vec out(n);
    if (n > 0) be().copy_to_host(out.data(), p, n * sizeof(float));
    return out;
  }
  std::vector<int> get_ints(const int* p, size_t n) const {
    std::vector<int> out(n);
    if (n > 0) be().copy_to_host(out.data(), p, n * sizeof(int));
    return out;
  }
  void release() { held_.clear(); }

 private:
  const Backend* be_ = nullptr;
  std::vector<Tensor> held_;
};

#define REQUIRE_OP(op)                                                                     \
  do {                                                                                     \
    if (!be().supports(op))                                                                \
      GTEST_SKIP() << be().name() << " backend lacks " << kn::op_name(op) << " (skipped)"; \
  } while (0)

TEST_P(BackendOps, ListsWhatItSupports) {
  std::string lacking;
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i)
    if (!be().supports(static_cast<Op>(i)))
      lacking += std::string(lacking.empty() ? "" : ", ") + kn::op_name(static_cast<Op>(i));
  if (!lacking.empty()) std::printf("[ %s backend lacks ] %s\n", be().name(), lacking.c_str());
  if (be().device() == Device::Host) {
    EXPECT_EQ(lacking, "") << "the host backend runs every op";
  }
  // An op a backend lacks says so by name.
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    const Op op = static_cast<Op>(i);
    if (be().supports(op) || op != Op::Swiglu) continue;
    try {
      be().swiglu(nullptr, nullptr, 0, 0);
      ADD_FAILURE() << "an unsupported op must throw";
    } catch (const hypic::Error& e) {
      EXPECT_NE(std::string(e.what()).find("swiglu"), std::string::npos) << e.what();
    }
  }
}

TEST_P(BackendOps, Gemm) {
  REQUIRE_OP(Op::Gemm);
  std::mt19937 rng(1);
  const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 64}, {65, 48, 130}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const auto& ab : std::vector<std::pair<float, float>>{{1.0f, 0.0f}, {0.5f, 2.0f}}) {
          const int m = s[0], n = s[1], k = s[2];
          const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
          const Vec a = randn(size_t(ta ? k : m) * lda, rng),
                    b = randn(size_t(tb ? n : k) * ldb, rng);
          Vec c = randn(size_t(m) * ldc, rng);
          float* dc = put(c);
          be().gemm(ta, tb, m, n, k, ab.first, put(a), lda, put(b), ldb, ab.second, dc, ldc);
          ref::gemm(ta, tb, m, n, k, ab.first, a, lda, b, ldb, ab.second, c, ldc);
          std::ostringstream where;
          where << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb
                << " beta=" << ab.second;
          expect_close(get(dc, c.size()), c, Op::Gemm, where.str());
          release();
        }
}

TEST_P(BackendOps, GemmStridedBatched) {
  REQUIRE_OP(Op::GemmStridedBatched);
  std::mt19937 rng(2);
  const int shapes[][3] = {{48, 48, 48}, {5, 80, 48}, {17, 3, 9}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta) {
      const int m = s[0], n = s[1], k = s[2], batch = 3;
      const int lda = ta ? m : k, ldb = n, ldc = n;
      const int64_t sa = int64_t(m) * k + 7, sb = int64_t(k) * n + 1, sc = int64_t(m) * n + 5;
      const Vec a = randn(size_t(sa) * batch, rng), b = randn(size_t(sb) * batch, rng);
      Vec c = randn(size_t(sc) * batch, rng);
      float* dc = put(c);
      be().gemm_strided_batched(ta, false, m, n, k, -1.0f, put(a), lda, sa, put(b), ldb, sb, 1.0f,
                                dc, ldc, sc, batch);
      for (int i = 0; i < batch; ++i)
        ref::gemm(ta, false, m, n, k, -1.0, a, lda, b, ldb, 1.0, c, ldc, size_t(sa) * i,
                  size_t(sb) * i, size_t(sc) * i);
      expect_close(get(dc, c.size()), c, Op::GemmStridedBatched,
                   std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
      release();
    }
}

TEST_P(BackendOps, Linear) {
  REQUIRE_OP(Op::Linear);
  std::mt19937 rng(3);
  const int shapes[][3] = {{1, 7, 5}, {63, 48, 96}, {65, 33, 80}};
  for (const auto& s : shapes)
    for (bool acc : {false, true}) {
      const int m = s[0], n = s[1], k = s[2];
      const Vec x = randn(size_t(m) * k, rng), w = randn(size_t(n) * k, rng);
      Vec y = randn(size_t(m) * n, rng);
      float* dy = put(y);
      be().linear(put(x), put(w), dy, m, n, k, acc);
      ref::gemm(false, true, m, n, k, 1.0, x, k, w, k, acc ? 1.0 : 0.0, y, n);
      expect_close(get(dy, y.size()), y, Op::Linear,
                   std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
      release();
    }
}

// Weights as a tensor: f32 through linear, bf16 through linear_bf16 (the path the host picks
// for the shape: few rows run the AVX-512 BF16 kernel where the CPU has it), rows row0 … of a
// taller matrix as the layers' in_proj splits are.
TEST_P(BackendOps, LinearBf16WeightTensor) {
  REQUIRE_OP(Op::LinearBf16);
  std::mt19937 rng(31);
  const int shapes[][3] = {{1, 7, 5}, {3, 9, 33}, {5, 48, 96}, {16, 40, 130}, {65, 33, 80}};
  for (const auto& s : shapes)
    for (bool acc : {false, true}) {
      const int m = s[0], n = s[1], k = s[2], row0 = 3, rows = n + 5;
      const Vec x = randn(size_t(m) * k, rng);
      Vec w;
      Tensor wt = bf16_matrix(randn(size_t(rows) * k, rng), rows, k, &w);
      if (be().device() != Device::Host) wt = wt.to(be().device(), &be());
      Vec y = randn(size_t(m) * n, rng);
      float* dy = put(y);
      be().linear(put(x), wt, dy, m, n, k, acc, row0);
      Vec mag = abs_of(y);
      ref::gemm(false, true, m, n, k, 1.0, abs_of(x), k, abs_of(w), k, acc ? 1.0 : 0.0, mag, n, 0,
                size_t(row0) * k, 0);
      ref::gemm(false, true, m, n, k, 1.0, x, k, w, k, acc ? 1.0 : 0.0, y, n, 0, size_t(row0) * k,
                0);
      const std::string where =
          std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
      if (be().tensor_core_products())
        expect_within_bf16_bound(get(dy, y.size()), y, mag, k, where);
      else
        expect_close(get(dy, y.size()), y, Op::LinearBf16, where);
      release();
    }
  // A weight from another memory, or rows past its end, is one clear error.
  Vec w;
  const Tensor wt = bf16_matrix(randn(8 * 4, rng), 8, 4, &w);
  float* dy = put(Vec(16));
  EXPECT_THROW(be().linear(put(Vec(8)), wt.to(be().device(), &be()), dy, 2, 8, 4, false, 1),
               hypic::Error);
}

TEST_P(BackendOps, GatherRowsBf16Table) {
  REQUIRE_OP(Op::GatherRowsBf16);
  std::mt19937 rng(32);
  Vec want_table;
  Tensor table = bf16_matrix(randn(size_t(11) * 37, rng), 11, 37, &want_table);
  if (be().device() != Device::Host) table = table.to(be().device(), &be());
  const std::vector<int> ids = {3, 0, 10, 3, 7};
  Vec want;
  for (int id : ids)
    want.insert(want.end(), want_table.begin() + size_t(id) * 37,
                want_table.begin() + size_t(id + 1) * 37);
  float* out = put(Vec(want.size(), -1.0f));
  be().gather_rows(table, reinterpret_cast<const int32_t*>(put_ints(ids)),
                   static_cast<int>(ids.size()), out);
  expect_close(get(out, want.size()), want, Op::GatherRowsBf16, "5 ids");
}

TEST_P(BackendOps, CopyStridedAndGatherRows) {
  REQUIRE_OP(Op::CopyStrided);
  std::mt19937 rng(4);
  for (const auto& s :
       std::vector<std::vector<int>>{{5, 17, 3, 9}, {64, 96, 48, 48}, {1, 10, 0, 10}}) {
    const int rows = s[0], ld = s[1], offset = s[2], cols = s[3];
    const Vec src = randn(size_t(rows) * ld, rng);
    Vec want(size_t(rows) * cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[size_t(r) * cols + c] = src[size_t(r) * ld + offset + c];
    float* dst = put(Vec(want.size(), -1.0f));
    be().copy_strided(put(src), ld, offset, dst, rows, cols);
    expect_close(get(dst, want.size()), want, Op::CopyStrided, std::to_string(rows) + " rows");
    release();
  }
  REQUIRE_OP(Op::GatherRows);
  const int vocab = 11, cols = 48;
  const Vec table = randn(size_t(vocab) * cols, rng);
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 1, 9};
  Vec want;
  for (int id : ids)
    want.insert(want.end(), table.begin() + id * cols, table.begin() + (id + 1) * cols);
  float* out = put(Vec(want.size()));
  const int* dids = put_ints(std::vector<int>(ids.begin(), ids.end()));
  be().gather_rows(put(table), cols, reinterpret_cast<const int32_t*>(dids), int(ids.size()), out);
  expect_close(get(out, want.size()), want, Op::GatherRows, "7 ids");
}

// ---- linear-attention family (inputs: ref::family_data) ----
TEST_P(BackendOps, FamilyChunked) {
  REQUIRE_OP(Op::FamilyChunked);
  std::mt19937 rng(5);
  // {Hk, Hv, dk, dv}: GQA ratios 1, 2, 4 and a small odd-sized head.
  const int heads[][4] = {{2, 2, 48, 80}, {1, 2, 48, 80}, {1, 4, 48, 80}, {1, 2, 16, 24}};
  for (kn::Member m : ref::kFamilyMembers)
    for (int T : {1, 23, 63, 64, 65, 130})
      for (const auto& h : heads) {
        ref::FamilyData f = ref::family_data(m, {T, h[0], h[1], h[2], h[3]}, rng);
        const kn::FamilySpec spec = kn::member_spec(m);
        float* state = put(f.state);
        float* out = put(Vec(size_t(T) * h[1] * h[3]));
        const size_t tsize =
            size_t(kn::transition_floats_per_head(kn::natural_structure(spec), h[2])) * h[1];
        float* trans = put(Vec(tsize));
        const kn::FamilyInputs in{put(f.q), put(f.k), put(f.v), f.g.empty() ? nullptr : put(f.g),
                                  f.beta.empty() ? nullptr : put(f.beta)};
        be().family_chunked(spec, {T, h[0], h[1], h[2], h[3]}, in, state, out, trans, 64);
        Vec want_out, want_t;
        ref::family(f.c, f.q, f.k, f.v, f.g, f.beta, f.state, want_out, want_t);
        std::ostringstream where;
        where << kn::member_name(m) << " T=" << T << " Hk=" << h[0] << " Hv=" << h[1]
              << " dk=" << h[2] << " dv=" << h[3];
        const double tol = be().tensor_core_products() ? kFamilyBf16Tolerance : -1.0;
        expect_close(get(out, want_out.size()), want_out, Op::FamilyChunked, where.str() + " out",
                     tol);
        expect_close(get(state, f.state.size()), f.state, Op::FamilyChunked, where.str() + " state",
                     tol);
        expect_close(get(trans, tsize), ref::natural_transition(f.c, want_t), Op::FamilyChunked,
                     where.str() + " transition", tol);
        release();
      }
}

TEST_P(BackendOps, FamilyChunkedLowRank) {
  REQUIRE_OP(Op::FamilyChunkedLowRank);
  std::mt19937 rng(6);
  for (kn::Member m : {kn::Member::DeltaNet, kn::Member::GatedDeltaNet, kn::Member::KDA})
    for (int T : {1, 7, 23})
      for (int ratio : {1, 2, 4}) {
        const int Hk = 1, Hv = ratio, dk = 48, dv = 80;
        ref::FamilyData f = ref::family_data(m, {T, Hk, Hv, dk, dv}, rng);
        float* state = put(f.state);
        float* out = put(Vec(size_t(T) * Hv * dv));
        float* d = put(Vec(size_t(Hv) * dk));
        float* x = put(Vec(size_t(Hv) * T * dk));
        float* y = put(Vec(size_t(Hv) * T * dk));
        const kn::FamilyInputs in{put(f.q), put(f.k), put(f.v), f.g.empty() ? nullptr : put(f.g),
                                  put(f.beta)};
        be().family_chunked_lowrank(kn::member_spec(m), {T, Hk, Hv, dk, dv}, in, state, out, d, x,
                                    y);
        Vec want_out, want_t;
        ref::family(f.c, f.q, f.k, f.v, f.g, f.beta, f.state, want_out, want_t);
        // T = diag(d) − Xᵀ Y per head, rebuilt in double.
        const Vec dh = get(d, size_t(Hv) * dk), xh = get(x, size_t(Hv) * T * dk),
                  yh = get(y, xh.size());
        Vec got_t(want_t.size());
        for (int h = 0; h < Hv; ++h)
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dk; ++j) {
              double s = i == j ? dh[size_t(h) * dk + i] : 0.0;
              for (int r = 0; r < T; ++r)
                s -= double(xh[(size_t(h) * T + r) * dk + i]) * yh[(size_t(h) * T + r) * dk + j];
              got_t[(size_t(h) * dk + i) * dk + j] = float(s);
            }
        const std::string where = std::string(kn::member_name(m)) + " T=" + std::to_string(T) +
                                  " Hv=" + std::to_string(Hv);
        const double tol = be().tensor_core_products() ? kFamilyBf16Tolerance : -1.0;
        expect_close(get(out, want_out.size()), want_out, Op::FamilyChunkedLowRank, where + " out",
                     tol);
        expect_close(get(state, f.state.size()), f.state, Op::FamilyChunkedLowRank,
                     where + " state", tol);
        expect_close(got_t, want_t, Op::FamilyChunkedLowRank, where + " transition", tol);
        release();
      }
}

TEST_P(BackendOps, FamilyRecurrentF32) {
  REQUIRE_OP(Op::FamilyRecurrentF32);
  std::mt19937 rng(7);
  for (kn::Member m : ref::kFamilyMembers)
    for (int T : {1, 3, 17})
      for (int ratio : {1, 4}) {
        ref::FamilyData f = ref::family_data(m, {T, 1, ratio, 48, 80}, rng);
        float* state = put(f.state);
        float* out = put(Vec(size_t(T) * ratio * 80));
        const kn::FamilyInputs in{put(f.q), put(f.k), put(f.v), f.g.empty() ? nullptr : put(f.g),
                                  f.beta.empty() ? nullptr : put(f.beta)};
        be().family_recurrent_f32(kn::member_spec(m), {T, 1, ratio, 48, 80}, in, state, out);
        Vec want_out, want_t;
        ref::family(f.c, f.q, f.k, f.v, f.g, f.beta, f.state, want_out, want_t);
        const std::string where = std::string(kn::member_name(m)) + " T=" + std::to_string(T);
        expect_close(get(out, want_out.size()), want_out, Op::FamilyRecurrentF32, where + " out");
        expect_close(get(state, f.state.size()), f.state, Op::FamilyRecurrentF32, where + " state");
        release();
      }
}

// The family's argument checks (family_checks.hpp), one for every entry point on every
// backend: each kind of bad call refused with its one message before anything runs (the state
// untouched); without tokens no input is needed.
TEST_P(BackendOps, FamilyRefusesBadCalls) {
  REQUIRE_OP(Op::FamilyChunked);
  REQUIRE_OP(Op::FamilyChunkedLowRank);
  REQUIRE_OP(Op::FamilyRecurrentF32);
  const int T = 3, Hk = 1, Hv = 2, dk = 4, dv = 4;
  const Vec state0(size_t(Hv) * dk * dv, 0.25f);
  float* q = put(Vec(size_t(T) * Hk * dk, 0.5f));
  float* k = put(Vec(size_t(T) * Hk * dk, 0.5f));
  float* v = put(Vec(size_t(T) * Hv * dv, 1.0f));
  float* g = put(Vec(size_t(T) * Hv * dk, -0.1f));
  float* beta = put(Vec(size_t(T) * Hv, 0.5f));
  float* state = put(state0);
  float* out = put(Vec(size_t(T) * Hv * dv));
  float* trans = put(Vec(size_t(Hv) * dk * dk));
  float* d = put(Vec(size_t(Hv) * dk));
  float* x = put(Vec(size_t(Hv) * T * dk));
  float* y = put(Vec(size_t(Hv) * T * dk));
  const kn::FamilyDims dims{T, Hk, Hv, dk, dv};
  const std::string bad_dims = "linear family: bad dims (Hv must be a multiple of Hk)";
  struct Bad {
    const char* what;
    kn::FamilyDims d;
    kn::FamilyInputs in;
    std::string message;
  };
  const Bad bad[] = {
      {"Hv not a multiple of Hk", {T, 2, 3, dk, dv}, {q, k, v, g, beta}, bad_dims},
      {"T < 0", {-1, Hk, Hv, dk, dv}, {q, k, v, g, beta}, bad_dims},
      {"Hk = 0", {T, 0, Hv, dk, dv}, {q, k, v, g, beta}, bad_dims},
      {"Hv = 0", {T, Hk, 0, dk, dv}, {q, k, v, g, beta}, bad_dims},
      {"dk = 0", {T, Hk, Hv, 0, dv}, {q, k, v, g, beta}, bad_dims},
      {"dv = 0", {T, Hk, Hv, dk, 0}, {q, k, v, g, beta}, bad_dims},
      {"no q", dims, {nullptr, k, v, g, beta}, "linear family: q, k, v required"},
      {"no k", dims, {q, nullptr, v, g, beta}, "linear family: q, k, v required"},
      {"no v", dims, {q, k, nullptr, g, beta}, "linear family: q, k, v required"},
      {"no g", dims, {q, k, v, nullptr, beta}, "linear family: decaying member needs g"},
      {"no beta", dims, {q, k, v, g, nullptr}, "linear family: delta member needs beta"},
  };
  // Gated DeltaNet (scalar decay) and KDA (per-channel decay): both decay and erase.
  for (kn::Member m : {kn::Member::GatedDeltaNet, kn::Member::KDA}) {
    const kn::FamilySpec spec = kn::member_spec(m);
    for (const Bad& b : bad) {
      const std::string where = std::string(kn::member_name(m)) + ", " + b.what;
      EXPECT_EQ(ref::refusal([&] { be().family_chunked(spec, b.d, b.in, state, out, trans, 64); }),
                b.message)
          << "family_chunked, " << where;
      EXPECT_EQ(
          ref::refusal([&] { be().family_chunked_lowrank(spec, b.d, b.in, state, out, d, x, y); }),
          b.message)
          << "family_chunked_lowrank, " << where;
      EXPECT_EQ(ref::refusal([&] { be().family_recurrent_f32(spec, b.d, b.in, state, out); }),
                b.message)
          << "family_recurrent_f32, " << where;
    }
    EXPECT_EQ(get(state, state0.size()), state0) << kn::member_name(m) << ": state changed";
    EXPECT_EQ(ref::refusal([&] {
                be().family_recurrent_f32(spec, {0, Hk, Hv, dk, dv}, {}, state, nullptr);
              }),
              "(accepted)")
        << kn::member_name(m) << ": no tokens, no inputs";
  }
  // The checks ask only for what a member uses: linear attention needs neither g nor beta.
  EXPECT_EQ(ref::refusal([&] {
              be().family_recurrent_f32(kn::member_spec(kn::Member::LinearAttention), dims,
                                        {q, k, v, nullptr, nullptr}, state, out);
            }),
            "(accepted)");
  release();
}

TEST_P(BackendOps, CausalConv1d) {
  REQUIRE_OP(Op::CausalConv1dSilu);
  std::mt19937 rng(8);
  for (int T : {1, 2, 5, 64, 65})
    for (int C : {7, 96})
      for (int K : {2, 4}) {
        const Vec x = randn(size_t(T) * C, rng), w = randn(size_t(C) * K, rng, 0.5f);
        Vec state = randn(size_t(K - 1) * C, rng), tail_state = state;
        float* dstate = put(state);
        float* dtail = put(tail_state);
        float* y = put(Vec(size_t(T) * C));
        const float* dx = put(x);
        be().causal_conv1d_silu(dx, put(w), dstate, y, T, C, K);
        Vec want_y;
        ref::conv1d(x, w, state, &want_y, T, C, K);
        const std::string where =
            "T=" + std::to_string(T) + " C=" + std::to_string(C) + " K=" + std::to_string(K);
        expect_close(get(y, want_y.size()), want_y, Op::CausalConv1dSilu, where + " y");
        expect_close(get(dstate, state.size()), state, Op::CausalConv1dSilu, where + " state");
        if (be().supports(Op::CausalConv1dTail)) {
          be().causal_conv1d_tail(dx, dtail, T, C, K);
          ref::conv1d(x, w, tail_state, nullptr, T, C, K);
          expect_close(get(dtail, tail_state.size()), tail_state, Op::CausalConv1dTail, where);
        }
        release();
      }
}

TEST_P(BackendOps, MoeRoutingSigmoidGrouped) {
  REQUIRE_OP(Op::MoeRoute);
  std::mt19937 rng(16);
  for (int T : {1, 9})
    for (int E : {8, 24})
      for (int groups : {1, 4})
        for (int kept : {1, 2})
          for (bool with_bias : {false, true}) {
            if (kept > groups) continue;
            const int k = std::min(3, kept * (E / groups));
            const Vec logits = randn(size_t(T) * E, rng, 2.0f);
            const Vec bias = with_bias ? randn(E, rng, 0.3f) : Vec();
            kn::MoeRouteSpec spec;
            spec.experts = E;
            spec.top_k = k;
            spec.scoring = kn::RouteScoring::Sigmoid;
            spec.n_group = groups;
            spec.topk_group = kept;
            spec.norm_topk = groups == 1;  // both settings: norm with and without groups
            spec.scale = 2.5f;
            int* experts = put_ints(std::vector<int>(size_t(T) * k));
            float* weights = put(Vec(size_t(T) * k));
            be().moe_route(spec, put(logits), with_bias ? put(bias) : nullptr, T, experts, weights);
            std::vector<int> want_e;
            Vec want_w;
            ref::moe_route_sigmoid(logits, bias, T, E, k, groups, kept, spec.norm_topk, 2.5, want_e,
                                   want_w);
            const std::string where = "T=" + std::to_string(T) + " E=" + std::to_string(E) +
                                      " groups " + std::to_string(kept) + "/" +
                                      std::to_string(groups) + (with_bias ? " bias" : "");
            EXPECT_EQ(get_ints(experts, want_e.size()), want_e) << where;
            expect_close(get(weights, want_w.size()), want_w, Op::MoeRoute, where);
            release();
          }
  // Inconsistent specs are refused before anything runs.
  kn::MoeRouteSpec bad;
  bad.experts = 8;
  bad.top_k = 2;
  bad.n_group = 3;
  bad.scoring = kn::RouteScoring::Sigmoid;
  EXPECT_THROW(be().moe_route(bad, nullptr, nullptr, 0, nullptr, nullptr), std::invalid_argument);
  bad.n_group = 1;
  bad.scoring = kn::RouteScoring::Softmax;
  const float one_bias[8] = {};
  EXPECT_THROW(be().moe_route(bad, nullptr, one_bias, 0, nullptr, nullptr), std::invalid_argument);
}

TEST_P(BackendOps, RmsNorm) {
  REQUIRE_OP(Op::RmsNorm);
  std::mt19937 rng(19);
  for (int rows : {1, 7, 33})
    for (int cols : {48, 300})
      for (bool in_place : {false, true}) {
        const Vec x = randn(size_t(rows) * cols, rng, 2.0f), w = randn(cols, rng, 0.3f);
        float* dx = put(x);
        float* y = in_place ? dx : put(Vec(x.size()));
        be().rms_norm(dx, put(w), y, rows, cols, 1e-6f);
        expect_close(get(y, x.size()), ref::rms_norm(x, w, rows, cols, 1e-6), Op::RmsNorm,
                     std::to_string(rows) + "x" + std::to_string(cols));
        release();
      }
}

TEST_P(BackendOps, RmsNormZeroCentred) {
  REQUIRE_OP(Op::RmsNormZeroCentred);
  std::mt19937 rng(9);
  for (int rows : {1, 7, 33})
    for (int cols : {48, 80, 96, 300})
      for (bool in_place : {false, true}) {
        const Vec x = randn(size_t(rows) * cols, rng, 2.0f), w = randn(cols, rng, 0.3f);
        float* dx = put(x);
        float* y = in_place ? dx : put(Vec(x.size()));
        be().rms_norm_zero_centred(dx, put(w), y, rows, cols, 1e-6f);
        expect_close(get(y, x.size()), ref::rms_norm_zc(x, w, rows, cols, 1e-6),
                     Op::RmsNormZeroCentred, std::to_string(rows) + "x" + std::to_string(cols));
        release();
      }
}

TEST_P(BackendOps, Axpby) {
  REQUIRE_OP(Op::Axpby);
  std::mt19937 rng(20);
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(4097), int64_t(70000)})
    for (float b : {0.0f, 1.0f, 0.75f})
      for (bool in_place : {false, true}) {
        const Vec x = randn(size_t(n), rng), y = randn(size_t(n), rng);
        const float a = 3.5f;
        Vec want(static_cast<size_t>(n));
        for (size_t i = 0; i < want.size(); ++i)
          want[i] =
              in_place ? float((double(a) + b) * x[i]) : float(a * double(x[i]) + b * double(y[i]));
        float* dx = put(x);
        float* dy = in_place ? dx : put(y);
        be().axpby(dx, dy, n, a, b);
        expect_close(get(dy, want.size()), want, Op::Axpby,
                     "n=" + std::to_string(n) + " b=" + std::to_string(b));
        release();
      }
}

TEST_P(BackendOps, GatedRmsNormAndL2Normalize) {
  REQUIRE_OP(Op::GatedRmsNorm);
  std::mt19937 rng(10);
  for (int rows : {1, 7, 33})
    for (int cols : {48, 80, 96}) {
      const Vec x = randn(size_t(rows) * cols, rng), z = randn(x.size(), rng), w = randn(cols, rng);
      float* y = put(Vec(x.size()));
      be().gated_rms_norm(put(x), put(z), put(w), y, rows, cols, 1e-6f);
      const std::string where = std::to_string(rows) + "x" + std::to_string(cols);
      expect_close(get(y, x.size()), ref::gated_rms_norm(x, z, w, rows, cols, 1e-6),
                   Op::GatedRmsNorm, where);
      if (be().supports(Op::L2NormalizeRows)) {
        float* dx = put(x);
        be().l2_normalize_rows(dx, rows, cols, 1e-6f, 0.125f);
        expect_close(get(dx, x.size()), ref::l2_normalize(x, rows, cols, 1e-6, 0.125),
                     Op::L2NormalizeRows, where);
      }
      release();
    }
}

TEST_P(BackendOps, RopeApplyAndShift) {
  REQUIRE_OP(Op::RopeApply);
  std::mt19937 rng(11);
  for (int T : {1, 5, 65})
    for (int heads : {1, 3})
      for (int hd : {48, 80, 96})
        for (int rot : {hd, hd / 4 * 2, 16})
          for (float theta : {10000.0f, 1e6f}) {
            const int64_t pos0 = T == 5 ? 0 : 777, delta = T == 65 ? -5 : 321;
            const kn::RopeDims d{T, heads, hd, rot, theta};
            const Vec x = randn(size_t(T) * heads * hd, rng);
            Vec want = x;
            for (int t = 0; t < T; ++t)
              for (int h = 0; h < heads; ++h)
                ref::rotate(&want[(size_t(t) * heads + h) * hd], rot, theta, false,
                            double(pos0 + t));
            float* dx = put(x);
            be().rope_apply(d, dx, pos0);
            std::ostringstream where;
            where << "T=" << T << " heads=" << heads << " hd=" << hd << " rot=" << rot
                  << " theta=" << theta;
            expect_close(get(dx, x.size()), want, Op::RopeApply, where.str());
            if (be().supports(Op::RopeShift)) {  // from what rope_apply produced
              Vec shifted = get(dx, x.size());
              for (int t = 0; t < T; ++t)
                for (int h = 0; h < heads; ++h)
                  ref::rotate(&shifted[(size_t(t) * heads + h) * hd], rot, theta, false,
                              double(delta));
              be().rope_shift(d, dx, delta);
              expect_close(get(dx, x.size()), shifted, Op::RopeShift, where.str());
            }
            release();
          }
}

TEST_P(BackendOps, RotaryRotateRowsAndColumns) {
  REQUIRE_OP(Op::RotaryRotateRows);
  std::mt19937 rng(12);
  for (int dk : {48, 80})
    for (int rot : {dk, 32})
      for (bool interleaved : {false, true})
        for (int64_t pos : {3, 1000}) {
          const kn::Rotary r{rot, 10000.0f, interleaved};
          const std::string where = "dk=" + std::to_string(dk) + " rot=" + std::to_string(rot) +
                                    (interleaved ? " interleaved" : " half") +
                                    " pos=" + std::to_string(pos);
          for (int n : {1, 7}) {
            const int ld = dk + 5;  // padding after each row stays untouched
            const Vec x = randn(size_t(n) * ld, rng);
            Vec want = x;
            for (int i = 0; i < n; ++i)
              ref::rotate(&want[size_t(i) * ld], rot, 10000.0, interleaved, double(pos));
            float* dx = put(x);
            be().rotary_rotate_rows(r, dx, n, ld, dk, pos);
            expect_close(get(dx, x.size()), want, Op::RotaryRotateRows, where);
          }
          if (!be().supports(Op::RotaryRotateColumns)) continue;
          for (int cols : {1, 9, 80}) {
            const Vec m = randn(size_t(dk) * cols, rng);
            Vec want = m;
            for (int c = 0; c < cols; ++c)
              ref::rotate(&want[c], rot, 10000.0, interleaved, double(pos), cols);
            float* dm = put(m);
            be().rotary_rotate_columns(r, dm, dk, cols, pos);
            expect_close(get(dm, m.size()), want, Op::RotaryRotateColumns,
                         where + " cols=" + std::to_string(cols));
          }
          release();
        }
}

// Every head's state rotated by the same R_pos (a Ring-linear S(R|0) moved to its segment's
// place), out of place (the source unchanged) and in place; dims past rotary_dim only copied.
TEST_P(BackendOps, RerotateStates) {
  REQUIRE_OP(Op::RerotateStates);
  std::mt19937 rng(21);
  for (int heads : {1, 3})
    for (int dk : {16, 48})
      for (int dv : {1, 17, 48})
        for (int rot : {dk, 8})
          for (bool interleaved : {false, true})
            for (int64_t pos : {0, 5, 4097}) {
              const kn::Rotary r{rot, 10000.0f, interleaved};
              const std::string where =
                  "heads=" + std::to_string(heads) + " dk=" + std::to_string(dk) +
                  " dv=" + std::to_string(dv) + " rot=" + std::to_string(rot) +
                  (interleaved ? " interleaved" : " half") + " pos=" + std::to_string(pos);
              const Vec s = randn(size_t(heads) * dk * dv, rng);
              Vec want = s;
              for (int h = 0; h < heads; ++h)
                for (int c = 0; c < dv; ++c)
                  ref::rotate(&want[size_t(h) * dk * dv + c], rot, 10000.0, interleaved,
                              double(pos), dv);
              float* src = put(s);
              float* dst = put(Vec(s.size(), -7.0f));
              be().rerotate_states(r, src, dst, heads, dk, dv, pos);
              expect_close(get(dst, s.size()), want, Op::RerotateStates, where + " out of place");
              EXPECT_EQ(get(src, s.size()), s) << where << ": the source changed";
              be().rerotate_states(r, src, src, heads, dk, dv, pos);
              expect_close(get(src, s.size()), want, Op::RerotateStates, where + " in place");
              release();
            }
}

// Rounding to the store's dtypes equals store::round_in_place bit for bit: ties, subnormals,
// overflow, infinities and NaN included (a resident entry rounded on the device must compose
// exactly as its stored copy will).
TEST_P(BackendOps, RoundToDtypeIsTheStoresEncoding) {
  REQUIRE_OP(Op::RoundToDtype);
  std::mt19937 rng(22);
  Vec x = randn(5000, rng, 3.0f);
  const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x3F800001u, 0x00000001u, 0x80000001u,
                              0x33000000u, 0x33000001u, 0x387FC000u, 0x38800000u, 0x477FE000u,
                              0x477FF000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00001u,
                              0x7F800001u, 0x00000000u, 0x80000000u, 0x3A801000u, 0x38801000u};
  for (uint32_t bits : special) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  for (const DType dt : {DType::BF16, DType::F16, DType::F32}) {
    Vec want = x;
    hypic::store::round_in_place(dt, want.data(), want.size());
    float* d = put(x);
    be().round_to_dtype(d, static_cast<int64_t>(x.size()), dt);
    const Vec got = get(d, x.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << hypic::dtype_name(dt);
    release();
  }
  EXPECT_THROW(be().round_to_dtype(put(x), 1, DType::I32), std::exception);
  release();
}

// Attention on tensor cores (Backend::tensor_core_products(): q, k, v rounded to bf16, scores
// with f32 accumulation, probabilities P rounded to bf16, P·V with f32 accumulation) against
// the double reference on the bf16-rounded q, k, v. What is left: each score off by at most
// δ = (hd + 2)·2⁻²³·scale·max Σ_c |q_c||k_c| (f32 sums), so each weight by a factor within
// e^{±2δ}; each P by u = 2⁻⁸ (its bf16 rounding); the f32 sums over n_kv keys by
// (n_kv + 2)·2⁻²³. Per element: |got − ref| ≤ (e^{2δ} − 1 + u + (n_kv + 2)·2⁻²³)·max |v|.
void expect_attention_within_bf16_bound(const Vec& got, Vec q, Vec k, Vec v, int T, int n_kv, int H,
                                        int Hkv, int hd, float scale,
                                        const std::vector<int>* positions,
                                        const std::string& where) {
  for (Vec* x : {&q, &k, &v})
    for (float& e : *x) e = widen_bf16(round_bf16(e));
  const Vec want = ref::attention(q, k, v, T, n_kv, H, Hkv, hd, scale, positions);
  double qk = 0.0, vmax = 0.0;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < n_kv; ++s) {
        double acc = 0.0;
        for (int c = 0; c < hd; ++c)
          acc += std::fabs(double(q[(size_t(t) * H + h) * hd + c])) *
                 std::fabs(double(k[(size_t(s) * Hkv + h / (H / Hkv)) * hd + c]));
        qk = std::max(qk, acc);
      }
  for (float e : v) vmax = std::max(vmax, std::fabs(double(e)));
  const double delta = (hd + 2) * std::ldexp(1.0, -23) * scale * qk;
  const double bound =
      (std::expm1(2 * delta) + std::ldexp(1.0, -8) + (n_kv + 2) * std::ldexp(1.0, -23)) * vmax;
  ASSERT_EQ(got.size(), want.size()) << where;
  double err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (!(e <= err)) err = e;
  }
  EXPECT_LE(err, bound) << where << " (attention on tensor cores)";
}

TEST_P(BackendOps, AttentionCausalGqa) {
  REQUIRE_OP(Op::AttentionCausal);
  std::mt19937 rng(13);
  const int heads[][2] = {{2, 2}, {4, 2}, {8, 2}};  // GQA ratios 1, 2, 4
  for (int T : {1, 7, 65})
    for (int cached : {0, 13})
      for (const auto& h : heads)
        for (int hd : {48, 80}) {
          const int n_kv = T + cached, H = h[0], Hkv = h[1];
          const float scale = 1.0f / std::sqrt(float(hd));
          const Vec q = randn(size_t(T) * H * hd, rng), k = randn(size_t(n_kv) * Hkv * hd, rng),
                    v = randn(size_t(n_kv) * Hkv * hd, rng);
          const kn::AttentionDims d{T, n_kv, H, Hkv, hd, scale};
          float* out = put(Vec(q.size()));
          float* work = put(Vec(std::max<size_t>(1, be().attention_workspace_floats(d))));
          be().attention_causal(d, put(q), put(k), put(v), out, work);
          std::ostringstream where;
          where << "T=" << T << " n_kv=" << n_kv << " H=" << H << " Hkv=" << Hkv << " hd=" << hd;
          if (be().tensor_core_products())
            expect_attention_within_bf16_bound(get(out, q.size()), q, k, v, T, n_kv, H, Hkv, hd,
                                               scale, nullptr, where.str());
          else
            expect_close(get(out, q.size()), ref::attention(q, k, v, T, n_kv, H, Hkv, hd, scale),
                         Op::AttentionCausal, where.str());
          release();
        }
}

// Queries at given positions: blocks separated by keys they did not bring (pic's junction
// windows attend to the cached keys between them), against the same reference.
TEST_P(BackendOps, AttentionCausalAtPositions) {
  REQUIRE_OP(Op::AttentionCausal);
  std::mt19937 rng(17);
  const std::vector<std::vector<int>> layouts = {
      {0, 1, 2, 9, 10, 30},
      {5},
      {3, 4, 5, 6, 7, 8, 9, 40, 41, 42, 43, 100, 101, 102, 103, 104},
      // windows several key steps (256 keys on the host) apart, one right after a step's start
      {0, 1, 2, 300, 301, 512, 700, 701, 702, 703, 1100},
      // and several of the device's 1024-key steps apart
      {1, 2, 1023, 1024, 2100, 2101, 3500}};
  for (const auto& positions : layouts)
    for (int hd : {48, 80}) {
      const int T = int(positions.size()), n_kv = positions.back() + 7, H = 4, Hkv = 2;
      const float scale = 1.0f / std::sqrt(float(hd));
      const Vec q = randn(size_t(T) * H * hd, rng), k = randn(size_t(n_kv) * Hkv * hd, rng),
                v = randn(size_t(n_kv) * Hkv * hd, rng);
      kn::AttentionDims d{T, n_kv, H, Hkv, hd, scale};
      d.positions = put_ints(positions);
      // At hd 80 the caller says it checked them on the host (the layers' path): a device op
      // then skips its own check and must compute the same.
      d.positions_checked = hd == 80;
      float* out = put(Vec(q.size()));
      float* work = put(Vec(std::max<size_t>(1, be().attention_workspace_floats(d))));
      be().attention_causal(d, put(q), put(k), put(v), out, work);
      const std::string where = "T=" + std::to_string(T) + " n_kv=" + std::to_string(n_kv) +
                                " hd=" + std::to_string(hd) + " at positions";
      if (be().tensor_core_products())
        expect_attention_within_bf16_bound(get(out, q.size()), q, k, v, T, n_kv, H, Hkv, hd, scale,
                                           &positions, where);
      else
        expect_close(get(out, q.size()),
                     ref::attention(q, k, v, T, n_kv, H, Hkv, hd, scale, &positions),
                     Op::AttentionCausal, where);
      release();
    }
}

// Positions that do not ascend below n_kv: every backend refuses them as the host does (the
// CUDA kernel would otherwise read keys out of range), before anything is written.
TEST_P(BackendOps, AttentionRejectsPositionsTheHostRejects) {
  REQUIRE_OP(Op::AttentionCausal);
  std::mt19937 rng(23);
  const int n_kv = 12, H = 2, Hkv = 1, hd = 16;
  for (const std::vector<int>& bad :
       std::vector<std::vector<int>>{{0, 12}, {3, 3}, {5, 4}, {-1, 2}, {0, 1, 2000000000}}) {
    const int T = int(bad.size());
    kn::AttentionDims d{T, n_kv, H, Hkv, hd, 0.25f};
    d.positions = bad.data();
    const Vec q = randn(size_t(T) * H * hd, rng), k = randn(size_t(n_kv) * Hkv * hd, rng);
    Vec host_out(q.size()), work(kn::host_backend().attention_workspace_floats(d));
    EXPECT_THROW(kn::host_backend().attention_causal(d, q.data(), k.data(), k.data(),
                                                     host_out.data(), work.data()),
                 std::invalid_argument);
    d.positions = put_ints(bad);
    const Vec sentinel(q.size(), 7.0f);
    float* out = put(sentinel);
    float* dwork = put(Vec(std::max<size_t>(1, be().attention_workspace_floats(d))));
    try {
      be().attention_causal(d, put(q), put(k), put(k), out, dwork);
      ADD_FAILURE() << be().name() << " accepted positions the host refuses";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("positions must ascend below n_kv"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(get(out, q.size()), sentinel) << "the refused call wrote its output";
    release();
  }
}

TEST_P(BackendOps, ElementwiseGates) {
  std::mt19937 rng(14);
  for (int rows : {1, 9})
    for (int cols : {7, 48, 80}) {
      const std::string where = std::to_string(rows) + "x" + std::to_string(cols);
      if (be().supports(Op::SigmoidGate)) {  // the attention output gate: gate_ld 2·cols
        const Vec x = randn(size_t(rows) * cols, rng), gate = randn(size_t(rows) * 2 * cols, rng);
        Vec want = x;
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            want[size_t(r) * cols + c] =
                float(x[size_t(r) * cols + c] * ref::sigmoid(gate[size_t(r) * 2 * cols + c]));
        float* dx = put(x);
        be().sigmoid_gate(dx, put(gate), rows, cols, 2 * cols);
        expect_close(get(dx, x.size()), want, Op::SigmoidGate, where);
      }
      if (be().supports(Op::Swiglu)) {
        const Vec gu = randn(size_t(rows) * 2 * cols, rng, 2.0f);
        Vec want(size_t(rows) * cols);
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            want[size_t(r) * cols + c] = float(ref::silu(gu[size_t(r) * 2 * cols + c]) *
                                               gu[size_t(r) * 2 * cols + cols + c]);
        float* out = put(Vec(want.size()));
        be().swiglu(put(gu), out, rows, cols);
        expect_close(get(out, want.size()), want, Op::Swiglu, where);
      }
      if (be().supports(Op::AddSigmoidScaled)) {
        const Vec x = randn(size_t(rows) * cols, rng), y = randn(x.size(), rng),
                  logit = randn(rows, rng);
        Vec want = x;
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            want[size_t(r) * cols + c] =
                float(x[size_t(r) * cols + c] + ref::sigmoid(logit[r]) * y[size_t(r) * cols + c]);
        float* dx = put(x);
        be().add_sigmoid_scaled(dx, put(y), put(logit), rows, cols);
        expect_close(get(dx, x.size()), want, Op::AddSigmoidScaled, where);
      }
      release();
    }
  if (!be().supports(Op::GdnGates)) return;
  for (int rows : {1, 9})
    for (int heads : {3, 8}) {  // b | a interleaved per row as the layer's projection lays them
      const int ld = 2 * heads;
      const Vec ba = randn(size_t(rows) * ld, rng, 2.0f), A_log = randn(heads, rng, 0.5f),
                dt_bias = randn(heads, rng, 0.5f);
      Vec want_beta(size_t(rows) * heads), want_g(want_beta.size());
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h) {
          want_beta[size_t(r) * heads + h] = float(ref::sigmoid(ba[size_t(r) * ld + h]));
          want_g[size_t(r) * heads + h] =
              float(-std::exp(double(A_log[h])) *
                    ref::softplus(ba[size_t(r) * ld + heads + h] + double(dt_bias[h])));
        }
      const float* dba = put(ba);
      float* beta = put(Vec(want_beta.size()));
      float* g = put(Vec(want_g.size()));
      be().gdn_gates(dba, dba + heads, ld, put(A_log), put(dt_bias), beta, g, rows, heads);
      const std::string where = std::to_string(rows) + " rows, " + std::to_string(heads) + " heads";
      expect_close(get(beta, want_beta.size()), want_beta, Op::GdnGates, where + " beta");
      expect_close(get(g, want_g.size()), want_g, Op::GdnGates, where + " g");
      release();
    }
}

TEST_P(BackendOps, MoeRoutingAndExperts) {
  REQUIRE_OP(Op::MoeRoute);
  std::mt19937 rng(15);
  for (int T : {1, 9})
    for (int E : {8, 13})
      for (int k : {1, 2, 4})
        for (bool norm : {false, true}) {
          const Vec logits = randn(size_t(T) * E, rng, 2.0f);
          int* experts = put_ints(std::vector<int>(size_t(T) * k));
          float* weights = put(Vec(size_t(T) * k));
          kn::MoeRouteSpec spec;
          spec.experts = E;
          spec.top_k = k;
          spec.norm_topk = norm;
          be().moe_route(spec, put(logits), nullptr, T, experts, weights);
          std::vector<int> want_e;
          Vec want_w;
          ref::moe_route(logits, T, E, k, norm, want_e, want_w);
          const std::string where = "T=" + std::to_string(T) + " E=" + std::to_string(E) +
                                    " k=" + std::to_string(k) + (norm ? " norm" : "");
          EXPECT_EQ(get_ints(experts, want_e.size()), want_e) << where;
          expect_close(get(weights, want_w.size()), want_w, Op::MoeRoute, where);
          if (!be().supports(Op::MoeGroup)) {
            release();
            continue;
          }
          // Group the pairs by expert: a stable counting sort.
          const int pairs = T * k;
          int* start = put_ints(std::vector<int>(E + 1));
          int* pair_ids = put_ints(std::vector<int>(pairs));
          be().moe_group(experts, T, k, E, start, pair_ids, put_ints(std::vector<int>(E)));
          std::vector<int> want_start(E + 1, 0), want_ids;
          for (int e = 0; e < E; ++e) {
            for (int i = 0; i < pairs; ++i)
              if (want_e[i] == e) want_ids.push_back(i);
            want_start[e + 1] = int(want_ids.size());
          }
          EXPECT_EQ(get_ints(start, E + 1), want_start) << where;
          EXPECT_EQ(get_ints(pair_ids, pairs), want_ids) << where;
          if (!be().supports(Op::MoeGather) || !be().supports(Op::MoeScatterAdd)) {
            release();
            continue;
          }
          // Gather each expert's rows, then scatter weighted "expert outputs" back.
          const int hidden = 48;
          const Vec x = randn(size_t(T) * hidden, rng), ye = randn(size_t(pairs) * hidden, rng);
          Vec out = randn(x.size(), rng);
          const float* dx = put(x);
          float* dout = put(out);
          for (int e = 0; e < E; ++e) {
            const int n = want_start[e + 1] - want_start[e];
            if (n == 0) continue;
            const int* list = pair_ids + want_start[e];
            float* xe = put(Vec(size_t(n) * hidden));
            be().moe_gather(dx, hidden, list, n, k, xe);
            Vec want_xe;
            for (int r = 0; r < n; ++r) {
              const int t = want_ids[want_start[e] + r] / k;
              want_xe.insert(want_xe.end(), x.begin() + t * hidden, x.begin() + (t + 1) * hidden);
            }
            expect_close(get(xe, want_xe.size()), want_xe, Op::MoeGather, where);
            const float* dye = put(Vec(ye.begin() + size_t(want_start[e]) * hidden,
                                       ye.begin() + size_t(want_start[e + 1]) * hidden));
            be().moe_scatter_add(dye, hidden, list, n, k, weights, dout);
            for (int r = 0; r < n; ++r) {
              const int p = want_ids[want_start[e] + r];
              for (int c = 0; c < hidden; ++c)
                out[size_t(p / k) * hidden + c] =
                    float(out[size_t(p / k) * hidden + c] +
                          double(want_w[p]) * ye[size_t(want_start[e] + r) * hidden + c]);
            }
          }
          expect_close(get(dout, out.size()), out, Op::MoeScatterAdd, where);
          release();
        }
}

// Groups of rows, each times its own weight (the experts after the sort by expert): empty
// groups, a group of one row, weights taller than n (their first n rows), in bf16 (the CUDA
// backend's grouped cuBLAS call on tensor cores) and in f32 (one linear per group).
TEST_P(BackendOps, GroupedLinear) {
  REQUIRE_OP(Op::GroupedLinear);
  std::mt19937 rng(41);
  const std::vector<int> sizes = {3, 0, 5, 1, 0, 7, 2};
  const int groups = static_cast<int>(sizes.size());
  std::vector<int> start(1, 0);
  for (int sz : sizes) start.push_back(start.back() + sz);
  const int rows = start.back();
  for (const auto& nk : std::vector<std::pair<int, int>>{{9, 33}, {48, 96}, {40, 130}})
    for (bool bf16 : {true, false}) {
      const int n = nk.first, k = nk.second;
      const Vec x = randn(size_t(rows) * k, rng);
      std::vector<Tensor> w(groups);
      std::vector<Vec> wv(groups);
      std::vector<const Tensor*> wp(groups, nullptr);
      for (int e = 0; e < groups; ++e) {
        if (sizes[e] == 0) continue;  // an empty group may pass no weight
        const int wrows = n + (e % 3);
        const Vec values = randn(size_t(wrows) * k, rng);
        if (bf16) {
          w[e] = bf16_matrix(values, wrows, k, &wv[e]);
        } else {
          wv[e] = values;
          w[e] = Tensor::from_vector({wrows, k}, values);
        }
        if (be().device() != Device::Host) w[e] = w[e].to(be().device(), &be());
        wp[e] = &w[e];
      }
      float* dy = put(Vec(size_t(rows) * n, 7.0f));
      be().grouped_linear(put(x), wp.data(), start.data(), groups, dy, n, k);
      Vec want(size_t(rows) * n), mag(size_t(rows) * n);
      for (int e = 0; e < groups; ++e) {
        if (sizes[e] == 0) continue;
        const size_t r0 = size_t(start[e]);
        ref::gemm(false, true, sizes[e], n, k, 1.0, x, k, wv[e], k, 0.0, want, n, r0 * k, 0,
                  r0 * n);
        ref::gemm(false, true, sizes[e], n, k, 1.0, abs_of(x), k, abs_of(wv[e]), k, 0.0, mag, n,
                  r0 * k, 0, r0 * n);
      }
      const std::string where = std::string(bf16 ? "bf16" : "f32") + " n=" + std::to_string(n) +
                                " k=" + std::to_string(k);
      if (bf16 && be().tensor_core_products())
        expect_within_bf16_bound(get(dy, want.size()), want, mag, k, where);
      else
        expect_close(get(dy, want.size()), want, Op::GroupedLinear, where);
      release();
    }
  // Starts that descend are one clear error.
  const std::vector<int> bad = {0, 2, 1};
  Tensor wt = Tensor::from_vector({2, 3}, Vec(6, 1.0f));
  if (be().device() != Device::Host) wt = wt.to(be().device(), &be());
  const Tensor* two[] = {&wt, &wt};
  float* dy = put(Vec(6));
  EXPECT_THROW(be().grouped_linear(put(Vec(6)), two, bad.data(), 2, dy, 2, 3), std::exception);
}

// The rows the last layer of a block needs (issue 48): linear_from and grouped_linear_from
// write, from their first needed row on, the bits of the whole product on every backend (the
// host runs only the tiles that hold such rows, a device may run the whole product). A shape of
// several row tiles on the host, f32 and bf16 weights; groups with no row needed, all needed,
// the last one only.
TEST_P(BackendOps, LinearFromGivesTheWholeProductsRows) {
  REQUIRE_OP(Op::GroupedLinear);
  std::mt19937 rng(43);
  const int m = 1100, n = 1024, k = 512;
  const Vec x = randn(size_t(m) * k, rng), y0 = randn(size_t(m) * n, rng);
  auto same_rows = [&](const Vec& got, const Vec& want, int r0, int r1) {
    return std::memcmp(got.data() + size_t(r0) * n, want.data() + size_t(r0) * n,
                       size_t(r1 - r0) * n * sizeof(float)) == 0;
  };
  for (bool bf16 : {false, true}) {
    Vec wv;
    Tensor w = bf16 ? bf16_matrix(randn(size_t(n) * k, rng), n, k, &wv)
                    : Tensor::from_vector({n, k}, randn(size_t(n) * k, rng));
    if (be().device() != Device::Host) w = w.to(be().device(), &be());
    const std::string what = bf16 ? "bf16" : "f32";
    const float* dx = put(x);
    float* whole = put(y0);
    be().linear(dx, w, whole, m, n, k, true);
    const Vec want = get(whole, y0.size());
    for (int first : {0, 300, m - 1}) {
      float* dy = put(y0);
      be().linear_from(first, dx, w, dy, m, n, k, true);
      EXPECT_TRUE(same_rows(get(dy, y0.size()), want, first, m)) << what << " first=" << first;
    }
    const std::vector<int> start = {0, 600, 600, 601, m};
    const std::vector<int> firsts = {550, 600, 601, 601};  // part, empty, none, all
    const Tensor* wp[] = {&w, &w, &w, &w};
    float* dg = put(y0);
    be().grouped_linear(dx, wp, start.data(), 4, dg, n, k);
    const Vec grouped = get(dg, y0.size());
    float* df = put(y0);
    be().grouped_linear_from(firsts.data(), dx, wp, start.data(), 4, df, n, k);
    const Vec from = get(df, y0.size());
    EXPECT_TRUE(same_rows(from, grouped, 550, 600)) << what;
    EXPECT_TRUE(same_rows(from, grouped, 601, m)) << what;
    release();
  }
}

// Every expert's rows combined in one call: against the double reference, and on the host bit
// for bit what moe_scatter_add per expert in ascending order gives (the layers' old path).
TEST_P(BackendOps, MoeCombine) {
  REQUIRE_OP(Op::MoeCombine);
  std::mt19937 rng(42);
  for (int T : {1, 9, 40})
    for (int k : {1, 2, 5}) {
      const int E = 13, hidden = 48 + T % 7, pairs = T * k;
      // Distinct experts per token, grouped as moe_group leaves them.
      std::vector<int> experts(static_cast<size_t>(pairs));
      for (int t = 0; t < T; ++t) {
        std::vector<int> all(E);
        for (int e = 0; e < E; ++e) all[e] = e;
        std::shuffle(all.begin(), all.end(), rng);
        for (int j = 0; j < k; ++j) experts[size_t(t) * k + j] = all[j];
      }
      std::vector<int> start(E + 1, 0), ids;
      for (int e = 0; e < E; ++e) {
        for (int i = 0; i < pairs; ++i)
          if (experts[i] == e) ids.push_back(i);
        start[e + 1] = int(ids.size());
      }
      const Vec ye = randn(size_t(pairs) * hidden, rng), w = uniform(size_t(pairs), rng, 0, 1);
      const Vec out0 = randn(size_t(T) * hidden, rng);
      Vec want = out0;
      for (int r = 0; r < pairs; ++r)
        for (int c = 0; c < hidden; ++c)
          want[size_t(ids[r] / k) * hidden + c] =
              float(double(want[size_t(ids[r] / k) * hidden + c]) +
                    double(w[ids[r]]) * ye[size_t(r) * hidden + c]);
      const int* dids = put_ints(ids);
      float* dout = put(out0);
      be().moe_combine(put(ye), hidden, dids, T, k, put(w), dout,
                       put_ints(std::vector<int>(pairs)));
      const Vec got = get(dout, out0.size());
      const std::string where = "T=" + std::to_string(T) + " k=" + std::to_string(k);
      expect_close(got, want, Op::MoeCombine, where);
      if (be().device() == Device::Host) {
        Vec per_expert = out0;
        for (int e = 0; e < E; ++e)
          if (start[e + 1] > start[e])
            kn::moe_scatter_add(ye.data() + size_t(start[e]) * hidden, hidden,
                                ids.data() + start[e], start[e + 1] - start[e], k, w.data(),
                                per_expert.data());
        EXPECT_EQ(std::memcmp(per_expert.data(), got.data(), got.size() * sizeof(float)), 0)
            << where << ": not bit for bit the per-expert scatter";
      }
      release();
    }
  EXPECT_THROW(
      be().moe_combine(nullptr, 4, nullptr, 1, kn::kMoeCombineMaxK + 1, nullptr, nullptr, nullptr),
      std::exception);
}

TEST_P(BackendOps, ComposeStatesEveryStructure) {
  REQUIRE_OP(Op::ComposeStates);
  std::mt19937 rng(16);
  using kn::TStructure;
  for (const auto& dims : std::vector<std::pair<int, int>>{{48, 80}, {16, 24}})
    for (bool addition : {false, true}) {
      const int H = 2, dk = dims.first, dv = dims.second, rank = 5;
      const TStructure structures[] = {TStructure::Scalar, TStructure::Diagonal, TStructure::Dense,
                                       TStructure::LowRank};
      std::vector<kn::TransitionRef> refs;
      std::vector<Vec> want;
      std::vector<float*> dstates;
      for (TStructure st : structures) {
        const int tf = st == TStructure::Scalar ? 1 : st == TStructure::Dense ? dk * dk : dk;
        const Vec t = uniform(size_t(H) * tf, rng, -1.0f, 1.0f),
                  s0 = randn(size_t(H) * dk * dv, rng);
        const Vec x = st == TStructure::LowRank ? randn(size_t(H) * rank * dk, rng, 0.3f) : Vec();
        const Vec y = st == TStructure::LowRank ? randn(size_t(H) * rank * dk, rng, 0.3f) : Vec();
        const Vec state = randn(size_t(H) * dk * dv, rng);
        // Dense T per head in double, then T·S + S0.
        Vec w(state.size());
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dv; ++j) {
              double acc = s0[(size_t(h) * dk + i) * dv + j];
              if (addition) {
                acc += state[(size_t(h) * dk + i) * dv + j];
              } else {
                for (int p = 0; p < dk; ++p) {
                  double tip = 0;
                  if (st == TStructure::Scalar) tip = i == p ? t[h] : 0.0;
                  if (st == TStructure::Diagonal || st == TStructure::LowRank)
                    tip = i == p ? t[size_t(h) * dk + i] : 0.0;
                  if (st == TStructure::Dense) tip = t[(size_t(h) * dk + i) * dk + p];
                  if (st == TStructure::LowRank)
                    for (int r = 0; r < rank; ++r)
                      tip -= double(x[(size_t(h) * rank + r) * dk + i]) *
                             y[(size_t(h) * rank + r) * dk + p];
                  acc += tip * state[(size_t(h) * dk + p) * dv + j];
                }
              }
              w[(size_t(h) * dk + i) * dv + j] = float(acc);
            }
        want.push_back(w);
        kn::TransitionRef r;
        r.structure = st;
        r.heads = H;
        r.dk = dk;
        r.dv = dv;
        r.rank = st == TStructure::LowRank ? rank : 0;
        r.t = put(t);
        r.x = x.empty() ? nullptr : put(x);
        r.y = y.empty() ? nullptr : put(y);
        r.s0 = put(s0);
        refs.push_back(r);
        dstates.push_back(put(state));
      }
      be().compose_states(refs.data(), dstates.data(), int(refs.size()), addition);
      for (size_t i = 0; i < refs.size(); ++i)
        expect_close(get(dstates[i], want[i].size()), want[i], Op::ComposeStates,
                     std::string(addition ? "addition " : "") + "structure " + std::to_string(i) +
                         " dk=" + std::to_string(dk));
      release();
    }
}

// The dtype axis of the products: bf16 inputs with f32 accumulation (cublasGemmEx) against the
// double reference on the same bf16-rounded values, so only the accumulation order differs.
// The host computes in f32 only; this case exists for the CUDA backend.
constexpr double kBf16GemmTol = 1e-5;  // as Op::Gemm: the inputs are exact in f32

uint16_t to_bf16(float x) {  // round to nearest even (inputs here are finite)
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

TEST(BackendOpsDtype, CudaGemmBf16) {
  const kn::DeviceInfo info = kn::cuda_device_info();
  if (!info.compiled) GTEST_SKIP() << "cuda backend: built without CUDA (-DHYPIC_CUDA=OFF)";
  if (info.count == 0)
    GTEST_SKIP() << "cuda backend: no CUDA device visible (" << info.description << ")";
  const Backend& be = kn::cuda_backend();
  std::mt19937 rng(17);
  auto upload_bf16 = [&](const Vec& x) {
    Tensor t({static_cast<int64_t>(x.size())}, DType::BF16, Device::Host);
    auto* p = static_cast<uint16_t*>(t.raw());
    for (size_t i = 0; i < x.size(); ++i) p[i] = to_bf16(x[i]);
    return t.to(Device::Cuda, &be);
  };
  auto rounded = [](Vec x) {
    for (float& v : x) v = from_bf16(to_bf16(v));
    return x;
  };
  const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 64}, {65, 48, 130}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const auto& ab : std::vector<std::pair<float, float>>{{1.0f, 0.0f}, {0.5f, 2.0f}}) {
          const int m = s[0], n = s[1], k = s[2];
          const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
          const Vec a = rounded(randn(size_t(ta ? k : m) * lda, rng)),
                    b = rounded(randn(size_t(tb ? n : k) * ldb, rng));
          Vec c = randn(size_t(m) * ldc, rng);
          const Tensor da = upload_bf16(a), db = upload_bf16(b);
          Tensor dc =
              Tensor::from_vector({static_cast<int64_t>(c.size())}, c).to(Device::Cuda, &be);
          kn::cuda::gemm_bf16(ta, tb, m, n, k, ab.first, static_cast<const uint16_t*>(da.raw()),
                              lda, static_cast<const uint16_t*>(db.raw()), ldb, ab.second,
                              static_cast<float*>(dc.raw()), ldc);
          ref::gemm(ta, tb, m, n, k, ab.first, a, lda, b, ldb, ab.second, c, ldc);
          const Vec got = dc.to_vector();
          double scale = 1.0, err = 0.0;
          for (size_t i = 0; i < c.size(); ++i) {
            scale = std::max(scale, std::fabs(double(c[i])));
            err = std::max(err, std::fabs(double(got[i]) - double(c[i])));
          }
          EXPECT_LE(err / scale, kBf16GemmTol)
              << "bf16 gemm " << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb
              << " beta=" << ab.second;
        }
}

// The bound of expect_within_bf16_bound against the tensor cores' arithmetic emulated here
// (activations rounded to bf16, f32 products and sums, forwards and backwards): met at every
// shape, and the results do show bf16 (the exact paths' f32 tolerance fails on them). And the
// bound is close to attainable: k equal activations 1 + 3·2⁻¹⁰ (rounded to 1, 0.75 u each)
// times weights 1 err by 0.75 of it, so an implementation with 1.5× bf16's error fails.
TEST(BackendOpsDtype, Bf16BoundOfTheTensorCorePath) {
  std::mt19937 rng(43);
  for (const auto& s : std::vector<std::array<int, 3>>{{4, 9, 33}, {17, 40, 512}, {3, 5, 4096}}) {
    const int m = s[0], n = s[1], k = s[2];
    const Vec x = randn(size_t(m) * k, rng);
    Vec w;
    bf16_matrix(randn(size_t(n) * k, rng), n, k, &w);
    Vec want(size_t(m) * n), mag(size_t(m) * n);
    ref::gemm(false, true, m, n, k, 1.0, x, k, w, k, 0.0, want, n);
    ref::gemm(false, true, m, n, k, 1.0, abs_of(x), k, abs_of(w), k, 0.0, mag, n);
    for (bool backwards : {false, true}) {
      Vec got(want.size());
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          float acc = 0.0f;
          for (int q = 0; q < k; ++q) {
            const int p = backwards ? k - 1 - q : q;
            acc += widen_bf16(round_bf16(x[size_t(i) * k + p])) * w[size_t(j) * k + p];
          }
          got[size_t(i) * n + j] = acc;
        }
      const std::string where = std::to_string(m) + "x" + std::to_string(n) + "x" +
                                std::to_string(k) + (backwards ? " backwards" : "");
      expect_within_bf16_bound(got, want, mag, k, where);
      double err = 0.0, scale = 1.0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(double(want[i])));
        err = std::max(err, std::fabs(double(got[i]) - want[i]));
      }
      EXPECT_GT(err / scale, 1e-5) << where << ": bf16 activations must show past f32's tolerance";
    }
  }
  const int k = 256;
  const float xv = 1.0f + 3.0f * std::ldexp(1.0f, -10);
  ASSERT_EQ(widen_bf16(round_bf16(xv)), 1.0f);
  const double want = double(xv) * k, mag = want;
  const double rounded = k, coarse = want - 1.5 * (want - rounded);
  const double bound = (std::ldexp(1.0, -8) + (k + 2) * std::ldexp(1.0, -23)) * mag;
  EXPECT_LE(std::fabs(rounded - want), bound);
  EXPECT_GT(std::fabs(coarse - want), bound);
}

// Every host bf16 path against the double reference (the same weights widened), over shapes
// with k off the kernel's 32-value steps, row and column remainders, and enough work to split
// into several tiles; each path bit-identical at 1, 2 and 3 threads.
TEST(BackendOpsDtype, HostBf16PathsMatchTheReference) {
  std::vector<kn::Bf16Gemm> paths = {kn::Bf16Gemm::Convert};
  if (kn::bf16_dot_available()) {
    paths.push_back(kn::Bf16Gemm::Dot3);
    paths.push_back(kn::Bf16Gemm::Dot2);
    paths.push_back(kn::Bf16Gemm::Dot1);
  } else {
    std::printf("[ skipped ] dot3/dot2/dot1: this CPU or build has no AVX-512 BF16\n");
  }
  std::mt19937 rng(33);
  const int shapes[][3] = {{1, 1, 1},   {1, 300, 64}, {4, 4, 31},
                           {7, 13, 95}, {33, 17, 64}, {600, 1100, 100}};
  const int threads_before = kn::threads();
  for (const auto& s : shapes) {
    const int m = s[0], n = s[1], k = s[2];
    const Vec x = randn(size_t(m) * k, rng);
    Vec w;
    const Tensor wt = bf16_matrix(randn(size_t(n) * k, rng), n, k, &w);
    const auto* wb = static_cast<const uint16_t*>(wt.raw());
    const Vec y0 = randn(size_t(m) * n, rng);
    for (bool acc : {false, true}) {
      Vec want = y0;
      ref::gemm(false, true, m, n, k, 1.0, x, k, w, k, acc ? 1.0 : 0.0, want, n);
      for (kn::Bf16Gemm p : paths) {
        // Dot1 rounds the activations once to bf16 (8 bits): ~2^-9 per term; Dot2 keeps ~16 bits.
        const double tol = p == kn::Bf16Gemm::Dot1 ? 2e-2 : p == kn::Bf16Gemm::Dot2 ? 1e-4 : 1e-5;
        Vec first;
        for (int t : {1, 2, 3}) {
          kn::set_threads(t);
          Vec y = y0;
          kn::linear_bf16_with(p, x.data(), wb, y.data(), m, n, k, acc);
          double scale = 1.0, err = 0.0;
          for (size_t i = 0; i < y.size(); ++i) {
            scale = std::max(scale, std::fabs(double(want[i])));
            const double e = std::fabs(double(y[i]) - double(want[i]));
            if (!(e <= err)) err = e;
          }
          EXPECT_LE(err / scale, tol) << kn::bf16_gemm_name(p) << " " << m << "x" << n << "x" << k
                                      << " acc=" << acc << " threads=" << t;
          // Dot1 is the tensor cores' arithmetic on the CPU (activations rounded once to bf16,
          // exact products, f32 sums): it must meet the bound the CUDA cases are held to.
          if (p == kn::Bf16Gemm::Dot1 && t == 1) {
            Vec mag = abs_of(y0);
            ref::gemm(false, true, m, n, k, 1.0, abs_of(x), k, abs_of(w), k, acc ? 1.0 : 0.0, mag,
                      n);
            expect_within_bf16_bound(y, want, mag, k,
                                     std::string("dot1 ") + std::to_string(m) + "x" +
                                         std::to_string(n) + "x" + std::to_string(k));
          }
          if (t == 1)
            first = y;
          else
            EXPECT_EQ(std::memcmp(first.data(), y.data(), y.size() * sizeof(float)), 0)
                << kn::bf16_gemm_name(p) << " " << m << "x" << n << "x" << k
                << " differs between 1 and " << t << " threads";
        }
      }
    }
  }
  kn::set_threads(threads_before);
  // The convert path multiplies exactly the widened weights with the f32 code: same bits as
  // kernels::linear on them.
  const int m = 40, n = 70, k = 50;
  const Vec x = randn(size_t(m) * k, rng);
  Vec w;
  const Tensor wt = bf16_matrix(randn(size_t(n) * k, rng), n, k, &w);
  Vec a(size_t(m) * n), b(size_t(m) * n);
  kn::linear(x.data(), w.data(), a.data(), m, n, k);
  kn::linear_bf16_with(kn::Bf16Gemm::Convert, x.data(), static_cast<const uint16_t*>(wt.raw()),
                       b.data(), m, n, k);
  EXPECT_EQ(a, b);
  // Auto keeps the precise paths only.
  for (int rows : {1, 8, 64, 1024}) {
    const kn::Bf16Gemm p = kn::bf16_gemm_path(rows, 2048, 2048);
    EXPECT_TRUE(p == kn::Bf16Gemm::Convert || p == kn::Bf16Gemm::Dot3) << rows;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Values("host", "cuda"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace backend_ops_test
}  // namespace
