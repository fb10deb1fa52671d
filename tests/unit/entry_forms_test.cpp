// Per-head forms of an entry's T (issue #47, src/pic/entry_forms.hpp): the SVD against a
// reference, the bound against the measured error, exactness at tolerance 0, each form through
// the store and back, an entry in today's layout still reading, and composition in the chosen
// forms against the dense product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "pic/entry_forms.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"
#include "store/segment_store.hpp"
#include "temp_path.hpp"

namespace {
namespace entry_forms_test {
using hypic::DType;
using hypic::pic::HeadChoice;
using hypic::pic::HeadForm;
using hypic::pic::LinearSummary;
using hypic::pic::TStructure;

std::vector<float> random_matrix(std::mt19937& rng, int rows, int cols, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> m(static_cast<size_t>(rows) * cols);
  for (float& x : m) x = n(rng);
  return m;
}

// c = a·b, row-major, in double.
std::vector<double> matmul(const std::vector<float>& a, const std::vector<float>& b, int m, int k,
                           int n) {
  std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j)
        c[size_t(i) * n + j] += double(a[size_t(i) * k + p]) * b[size_t(p) * n + j];
  return c;
}

double fro(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}
double fro(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

// A delta-rule segment's T over `tokens` tokens: Π g_t (I − β_t k_t k_tᵀ), unit keys.
std::vector<float> delta_rule_t(std::mt19937& rng, int dk, int tokens, float g_lo, float g_hi) {
  std::uniform_real_distribution<float> g(g_lo, g_hi), beta(0.0f, 1.0f);
  std::vector<double> t(size_t(dk) * dk, 0.0);
  for (int i = 0; i < dk; ++i) t[size_t(i) * dk + i] = 1.0;
  std::vector<float> k;
  for (int s = 0; s < tokens; ++s) {
    k = random_matrix(rng, 1, dk);
    const double nk = fro(k);
    for (float& x : k) x = static_cast<float>(x / nk);
    const double gs = g(rng), bs = beta(rng);
    // T ← g (I − β k kᵀ) T
    std::vector<double> kt(dk, 0.0);
    for (int c = 0; c < dk; ++c)
      for (int r = 0; r < dk; ++r) kt[c] += k[r] * t[size_t(r) * dk + c];
    for (int r = 0; r < dk; ++r)
      for (int c = 0; c < dk; ++c)
        t[size_t(r) * dk + c] = gs * (t[size_t(r) * dk + c] - bs * k[r] * kt[c]);
  }
  return std::vector<float>(t.begin(), t.end());
}

// One head's T̂ from its chosen payload, through unpack_t (as the store's reader builds it).
std::vector<float> unpacked_dense(const HeadChoice& c, const std::vector<float>& payload, int dk) {
  LinearSummary s;
  s.heads = 1;
  s.dk = dk;
  s.dv = 1;
  const std::vector<float> forms = {
      static_cast<float>(static_cast<int>(c.form)),
      static_cast<float>(c.form == HeadForm::Fp8 ? hypic::pic::kFp8PackBf16 : c.rank)};
  EXPECT_EQ(hypic::pic::unpack_t(forms, payload, s), "");
  if (s.structure != TStructure::Dense)
    s = hypic::pic::convert(hypic::kernels::host_backend(), s, TStructure::Dense);
  return s.t;
}

double spectral_norm(const std::vector<float>& a, int n) {
  std::vector<float> sigma, u, vt;
  hypic::pic::svd(n, a.data(), sigma, u, vt);
  return sigma[0];
}

TEST(EntryForms, JacobiSvdMatchesLapackAndReconstructs) {
  std::mt19937 rng(7);
  const int n = 24;
  const std::vector<float> a = random_matrix(rng, n, n);
  std::vector<float> sj, uj, vj;
  hypic::pic::svd_jacobi(n, a.data(), sj, uj, vj);
  // U Σ Vᵀ = A, Uᵀ U = I, descending σ.
  std::vector<float> us(uj);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) us[size_t(i) * n + k] *= sj[k];
  const std::vector<double> back = matmul(us, vj, n, n, n);
  double err = 0;
  for (size_t i = 0; i < back.size(); ++i) err = std::max(err, std::abs(back[i] - a[i]));
  EXPECT_LT(err, 1e-5);
  for (int k = 1; k < n; ++k) EXPECT_GE(sj[k - 1], sj[k]);
  std::vector<float> ut(size_t(n) * n);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) ut[size_t(k) * n + i] = uj[size_t(i) * n + k];
  const std::vector<double> utu = matmul(ut, uj, n, n, n);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) EXPECT_NEAR(utu[size_t(i) * n + k], i == k ? 1.0 : 0.0, 1e-5);
  // The library's SVD (LAPACK in an OpenBLAS build) agrees on the singular values and
  // reconstructs A as well.
  std::vector<float> sl, ul, vl;
  hypic::pic::svd(n, a.data(), sl, ul, vl);
  for (int k = 0; k < n; ++k) EXPECT_NEAR(sl[k], sj[k], 1e-4 * sj[0]) << k;
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) ul[size_t(i) * n + k] *= sl[k];
  const std::vector<double> back_l = matmul(ul, vl, n, n, n);
  for (size_t i = 0; i < back_l.size(); ++i) EXPECT_NEAR(back_l[i], a[i], 1e-4);
}

TEST(EntryForms, ToleranceZeroKeepsTheDenseTBitForBit) {
  std::mt19937 rng(3);
  const int dk = 16;
  const std::vector<float> t = delta_rule_t(rng, dk, 40, 0.5f, 0.6f);  // ‖T‖ tiny: absent fits
  std::vector<float> payload;
  HeadChoice c = hypic::pic::choose_head_form(t.data(), dk, 0.0, payload);
  EXPECT_EQ(c.form, HeadForm::Dense);
  EXPECT_EQ(payload, t);
  c = hypic::pic::choose_head_form(t.data(), dk, 1e-3, payload);
  EXPECT_EQ(c.form, HeadForm::Absent);  // the same T at a tolerance
  EXPECT_THROW(hypic::pic::choose_head_form(t.data(), dk, -1.0, payload), hypic::Error);
}

TEST(EntryForms, ExactStructuresAreFoundAndNoDecayKeepsDense) {
  const int dk = 16;
  std::vector<float> payload;
  // 0.5·I: a scalar, exactly (error 0 whatever τ).
  std::vector<float> t(size_t(dk) * dk, 0.0f);
  for (int i = 0; i < dk; ++i) t[size_t(i) * dk + i] = 0.5f;
  HeadChoice c = hypic::pic::choose_head_form(t.data(), dk, 1e-6, payload);
  EXPECT_EQ(c.form, HeadForm::Scalar);
  EXPECT_EQ(c.bound, 0.0);
  // A diagonal with a spread: diagonal, exactly.
  for (int i = 0; i < dk; ++i) t[size_t(i) * dk + i] = 0.3f + 0.02f * i;
  c = hypic::pic::choose_head_form(t.data(), dk, 1e-6, payload);
  EXPECT_EQ(c.form, HeadForm::Diagonal);
  EXPECT_EQ(payload.size(), size_t(dk));
  // Rank 2, decaying (τ < 1): its truncated SVD at rank 2, exactly.
  std::mt19937 rng(5);
  const std::vector<float> x = random_matrix(rng, 2, dk, 0.1f), y = random_matrix(rng, 2, dk, 0.1f);
  std::fill(t.begin(), t.end(), 0.0f);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dk; ++j)
        t[size_t(i) * dk + j] += x[size_t(r) * dk + i] * y[size_t(r) * dk + j];
  ASSERT_LT(spectral_norm(t, dk), 0.9);
  c = hypic::pic::choose_head_form(t.data(), dk, 1e-4, payload);
  EXPECT_EQ(c.form, HeadForm::LowRank);
  EXPECT_EQ(c.rank, 2);
  EXPECT_LE(c.bound, 1e-4);
  // No decay (an orthogonal T, ‖T‖₂ = 1): the bound (2) is infinite, only dense is safe.
  const std::vector<float> q = delta_rule_t(rng, dk, 3, 1.0f, 1.0f);
  std::vector<float> rot(size_t(dk) * dk, 0.0f);
  for (int i = 0; i < dk; ++i) rot[size_t(i) * dk + (i + 1) % dk] = 1.0f;  // a permutation
  c = hypic::pic::choose_head_form(rot.data(), dk, 0.1, payload);
  EXPECT_EQ(c.form, HeadForm::Dense);
  c = hypic::pic::choose_head_form(q.data(), dk, 0.1, payload);
  EXPECT_EQ(c.form, HeadForm::Dense);
}

// The bound against the measured error, on delta-rule T of several decays and tolerances:
// ‖ΔT‖₂ ≥ ‖ΔT·S‖_F / ‖S‖_F for random S, τ ≥ ‖T‖₂, and for S_in the stationary history of (2)
// (S_in = Σ_k T^k S0), ‖ΔT·S_in‖_F / ‖S0‖_F ≤ the head's bound ≤ the tolerance.
TEST(EntryForms, BoundHoldsAgainstMeasuredErrorOnRandomT) {
  std::mt19937 rng(11);
  const int dk = 32, dv = 8;
  int forms_seen[hypic::pic::kHeadForms] = {};
  for (int trial = 0; trial < 24; ++trial) {
    const float g_lo = trial % 3 == 0 ? 0.80f : trial % 3 == 1 ? 0.95f : 0.99f;
    const int tokens = 4 + 12 * (trial % 4);
    const std::vector<float> t = delta_rule_t(rng, dk, tokens, g_lo, std::min(1.0f, g_lo + 0.01f));
    const double tol = trial % 2 == 0 ? 1e-2 : 2e-3;
    std::vector<float> payload;
    const HeadChoice c = hypic::pic::choose_head_form(t.data(), dk, tol, payload);
    ++forms_seen[static_cast<int>(c.form)];
    EXPECT_LE(c.bound, tol);
    EXPECT_GE(c.t_norm, spectral_norm(t, dk) * (1 - 1e-6));
    const std::vector<float> that = unpacked_dense(c, payload, dk);
    std::vector<float> dt(t.size());
    for (size_t i = 0; i < t.size(); ++i) dt[i] = t[i] - that[i];
    for (int s = 0; s < 4; ++s) {
      const std::vector<float> st = random_matrix(rng, dk, dv);
      EXPECT_LE(fro(matmul(dt, st, dk, dk, dv)), c.t_error * fro(st) * (1 + 1e-5) + 1e-7);
    }
    if (c.t_norm < 1) {  // the stationary history of (2), 200 segments like this one
      const std::vector<float> s0 = random_matrix(rng, dk, dv);
      std::vector<float> sin(s0), term(s0);
      for (int k = 0; k < 200; ++k) {
        const std::vector<double> next = matmul(t, term, dk, dk, dv);
        term.assign(next.begin(), next.end());
        for (size_t i = 0; i < sin.size(); ++i) sin[i] += term[i];
      }
      EXPECT_LE(fro(matmul(dt, sin, dk, dk, dv)) / fro(s0), c.bound * (1 + 1e-5) + 1e-7);
    }
  }
  // The trials reach more than one form (else the test would not test the choice).
  int kinds = 0;
  for (int n : forms_seen) kinds += n > 0;
  EXPECT_GE(kinds, 2);
}

TEST(EntryForms, UnpackRefusesInconsistentForms) {
  LinearSummary s;
  s.heads = 2;
  s.dk = 4;
  s.dv = 4;
  EXPECT_NE(hypic::pic::unpack_t({0, 0}, {}, s), "");                            // one head's worth
  EXPECT_NE(hypic::pic::unpack_t({0, 0, 7, 0}, {}, s), "");                      // no form 7
  EXPECT_NE(hypic::pic::unpack_t({0, 0, 2.5f, 0}, {}, s), "");                   // not an integer
  EXPECT_NE(hypic::pic::unpack_t({0, 0, 3, 9}, std::vector<float>(76), s), "");  // rank > dk/2-1
  EXPECT_NE(hypic::pic::unpack_t({0, 0, 2, 1}, std::vector<float>(4), s), "");   // diag, rank 1
  EXPECT_NE(hypic::pic::unpack_t({1, 0, 2, 0}, std::vector<float>(4), s), "");   // 5 needed
  EXPECT_EQ(hypic::pic::unpack_t({1, 0, 2, 0}, std::vector<float>(5, 0.5f), s), "");
  EXPECT_EQ(s.structure, TStructure::Diagonal);
  EXPECT_EQ(hypic::pic::unpack_t({0, 0, 1, 0}, {0.25f}, s), "");
  EXPECT_EQ(s.structure, TStructure::Scalar);
  EXPECT_EQ(s.t, (std::vector<float>{0.0f, 0.25f}));
}

TEST(EntryForms, ParsesTheToleranceFlag) {
  EXPECT_EQ(hypic::pic::parse_entry_tolerance("auto", DType::BF16), std::ldexp(1.0, -9));
  EXPECT_EQ(hypic::pic::parse_entry_tolerance("auto", DType::F16), std::ldexp(1.0, -12));
  EXPECT_EQ(hypic::pic::parse_entry_tolerance("0", DType::BF16), 0.0);
  EXPECT_EQ(hypic::pic::parse_entry_tolerance("1e-2", DType::BF16), 1e-2);
  for (const char* bad : {"-1", "nan", "inf", "0.1x", "", "loose"})
    EXPECT_THROW(hypic::pic::parse_entry_tolerance(bad, DType::BF16), hypic::Error) << bad;
}

// A layer whose heads take every form: the entry composes in the chosen forms as the dense
// product of their unpacked T does, reads back from a store file bit for bit (each form
// through the store), and a store entry in today's layout (tolerance 0) still reads as dense.
TEST(EntryForms, MixedFormsRoundTripThroughTheStoreAndCompose) {
  const auto& be = hypic::kernels::host_backend();
  hypic::model::Model model = pic_test::remembering_tiny_host_model("qwen3_5", 21);
  const auto& cfg = model.config();
  std::mt19937 rng(4);
  const std::vector<int32_t> tokens = pic_test::random_tokens(rng, 48, cfg.vocab_size);
  const hypic::pic::SegmentEntry exact = hypic::pic::compute_entry(model, tokens, 4);
  ASSERT_FALSE(exact.linear.empty());
  const int H = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim;

  // Heads made to need each form: h0 decayed to nothing, h1 a scalar, h2 diagonal, h3 low rank
  // (the rest as computed).
  hypic::pic::SegmentEntry e = exact;
  LinearSummary& s = e.linear[0].summary;
  ASSERT_EQ(s.structure, TStructure::Dense);
  ASSERT_GE(H, 4);
  auto head = [&](int h) { return s.t.data() + size_t(dk) * dk * h; };
  for (int i = 0; i < dk * dk; ++i) head(0)[i] *= 1e-6f;
  for (int h = 1; h <= 3; ++h) std::fill(head(h), head(h) + size_t(dk) * dk, 0.0f);
  for (int i = 0; i < dk; ++i) {
    head(1)[size_t(i) * dk + i] = 0.4f;
    head(2)[size_t(i) * dk + i] = 0.2f + 0.01f * i;
  }
  head(3)[dk - 1] = 0.3f;  // T = 0.3·e₀e_{dk−1}ᵀ − 0.2·e_{dk−1}e₀ᵀ: rank 2
  head(3)[size_t(dk - 1) * dk] = -0.2f;
  const hypic::pic::SegmentEntry before = e;
  hypic::pic::FormTally tally;
  hypic::pic::choose_entry_forms(e, 1e-3, DType::BF16, &tally);
  ASSERT_FALSE(e.linear[0].t_forms.empty());
  const std::vector<float>& f = e.linear[0].t_forms;
  EXPECT_EQ(f[0], 0.0f);  // absent
  EXPECT_EQ(f[2], 1.0f);  // scalar
  EXPECT_EQ(f[4], 2.0f);  // diagonal
  EXPECT_EQ(f[6], 3.0f);  // low rank
  EXPECT_EQ(f[7], 2.0f);  // of rank 2 (a 2×2 rotation block)
  int64_t heads = 0;      // every head has one form (fp8 included: a bf16 store keeps it)
  for (int64_t n : tally.heads) heads += n;
  EXPECT_EQ(heads, static_cast<int64_t>(H) * static_cast<int64_t>(exact.linear.size()));
  EXPECT_EQ(tally.s_fp8_heads, 0);  // ε_S ~ 2⁻⁶ is far above 1e-3
  EXPECT_EQ(tally.s_full_heads, heads);

  // Composition in the chosen forms = the dense product of the unpacked T.
  std::vector<float> state = random_matrix(rng, H * dk, cfg.linear_value_head_dim);
  std::vector<float> via_forms = state, via_dense = state;
  hypic::pic::apply(be, e.linear[0].summary, via_forms.data());
  const LinearSummary dense = e.linear[0].summary.structure == TStructure::Dense
                                  ? e.linear[0].summary
                                  : hypic::pic::convert(be, e.linear[0].summary, TStructure::Dense);
  hypic::pic::apply(be, dense, via_dense.data());
  for (size_t i = 0; i < state.size(); ++i) EXPECT_NEAR(via_forms[i], via_dense[i], 1e-5) << i;
  // ... and within the head bounds of the exact T's composition (head 0 dropped: 1e-6 of T).
  std::vector<float> via_exact = state;
  hypic::pic::apply(be, before.linear[0].summary, via_exact.data());
  // Every head's ‖ΔT‖₂ ≤ tolerance · (1 − τ) ≤ the tolerance, so the whole change is within it.
  std::vector<float> diff(state.size());
  for (size_t i = 0; i < state.size(); ++i) diff[i] = via_forms[i] - via_exact[i];
  EXPECT_LE(fro(diff), 1e-3 * fro(state));
  EXPECT_GT(fro(diff), 0.0);  // and T did change

  // Through a bf16 store file: rounded as the store rounds, read back bit for bit.
  test_util::TempPath path("entry-forms-store");
  hypic::store::StoreOptions so;
  so.model_fingerprint = "entry-forms-test";
  so.junction = 4;
  so.dtype = DType::BF16;
  hypic::pic::round_to_dtype(e, DType::BF16);
  hypic::pic::SegmentEntry old_layout = exact;  // tolerance 0: today's arrays
  hypic::pic::choose_entry_forms(old_layout, 0.0, DType::BF16);
  ASSERT_TRUE(old_layout.linear[0].t_forms.empty());
  for (size_t l = 0; l < old_layout.linear.size(); ++l) {  // fp8 S is never chosen at 0 either
    EXPECT_TRUE(old_layout.linear[l].s_forms.empty()) << l;
    EXPECT_EQ(old_layout.linear[l].summary.s, exact.linear[l].summary.s) << l;
    EXPECT_EQ(old_layout.linear[l].summary.t, exact.linear[l].summary.t) << l;
  }
  hypic::pic::round_to_dtype(old_layout, DType::BF16);
  std::vector<int32_t> other = tokens;
  other[0] = (other[0] + 1) % cfg.vocab_size;
  {
    hypic::store::SegmentStore st = hypic::store::SegmentStore::create(path.str(), so);
    st.put(st.key_for(tokens), hypic::pic::store_view(e));
    st.put(st.key_for(other), hypic::pic::store_view(old_layout));
    const hypic::store::Entry raw = *st.get(st.key_for(other));
    EXPECT_EQ(raw.arrays.count("linear/0/Tform"), 0u);
    EXPECT_EQ(raw.arrays.count("linear/0/T"), 1u);
  }
  hypic::store::SegmentStore st = hypic::store::SegmentStore::open(
      path.str(), so.model_fingerprint, 4, hypic::store::OpenMode::kRead);
  hypic::store::Entry raw = *st.get(st.key_for(tokens));
  EXPECT_EQ(raw.arrays.count("linear/0/T"), 0u);
  EXPECT_EQ(raw.arrays.at("linear/0/Tform").numel(), 2 * H);
  const hypic::pic::SegmentEntry back = hypic::pic::from_store_entry(std::move(raw), cfg, 4);
  ASSERT_EQ(back.linear.size(), e.linear.size());
  for (size_t l = 0; l < e.linear.size(); ++l) {
    const LinearSummary &a = e.linear[l].summary, &b = back.linear[l].summary;
    EXPECT_EQ(a.structure, b.structure) << l;
    EXPECT_EQ(a.rank, b.rank) << l;
    EXPECT_EQ(a.t, b.t) << l;
    EXPECT_EQ(a.x, b.x) << l;
    EXPECT_EQ(a.y, b.y) << l;
    EXPECT_EQ(a.s, b.s) << l;
    EXPECT_EQ(e.linear[l].t_packed, back.linear[l].t_packed) << l;
  }
  // Today's layout reads as the dense entry it was.
  const hypic::pic::SegmentEntry old_back =
      hypic::pic::from_store_entry(std::move(*st.get(st.key_for(other))), cfg, 4);
  for (size_t l = 0; l < old_layout.linear.size(); ++l) {
    EXPECT_EQ(old_back.linear[l].summary.structure, TStructure::Dense);
    EXPECT_EQ(old_back.linear[l].summary.t, old_layout.linear[l].summary.t);
    EXPECT_TRUE(old_back.linear[l].t_forms.empty());
  }
}

// --- fp8 e4m3 with per-row scales (the plain reference) ---

// Every finite code decodes and encodes back to itself; halfway values round to the even
// mantissa; magnitudes past 448 saturate; NaN is the NaN code.
TEST(EntryForms, E4m3EncodesEveryCodeAndRoundsHalfToEven) {
  using hypic::pic::e4m3_decode;
  using hypic::pic::e4m3_encode;
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(e4m3_encode(v), c) << c << " " << v;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));         // the smallest subnormal
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));         // the smallest normal
  EXPECT_EQ(e4m3_encode(1.0 + 1.0 / 16), e4m3_encode(1.0));   // tie: to mantissa 000
  EXPECT_EQ(e4m3_encode(1.0 + 3.0 / 16), e4m3_encode(1.25));  // tie: to mantissa 010
  EXPECT_EQ(e4m3_encode(1.0 + 1.0 / 16 + 1e-9), e4m3_encode(1.125));
  EXPECT_EQ(e4m3_encode(3.0 * std::ldexp(1.0, -10)), 0x02);  // subnormal tie 1.5 steps: to 2
  EXPECT_EQ(e4m3_encode(1000.0), 0x7E);
  EXPECT_EQ(e4m3_encode(-INFINITY), 0xFE);
  EXPECT_EQ(e4m3_encode(NAN), 0x7F);
  EXPECT_EQ(e4m3_encode(-0.0), 0x80);
}

// A matrix whose rows span 60 decades: each element decodes to within e4m3's unit of itself
// (2⁻⁴·|x|, or half a subnormal step of its row's scale), so within 2⁻⁴ times the row's largest
// magnitude; the packed values are finite and survive a bf16 store's rounding bit for bit.
TEST(EntryForms, Fp8RoundTripIsBoundedByTheUnitTimesTheRowScale) {
  std::mt19937 rng(5);
  const int rows = 24, cols = 33;  // odd: the last pair is half empty
  std::vector<float> x = random_matrix(rng, rows, cols);
  for (int r = 0; r < rows; ++r) {
    const float scale = std::pow(10.0f, -30.0f + 60.0f * r / (rows - 1));
    for (int c = 0; c < cols; ++c) x[size_t(r) * cols + c] *= scale * (c == 3 ? 1e-5f : 1.0f);
  }
  std::vector<float> packed(static_cast<size_t>(hypic::pic::fp8_floats(rows, cols)));
  ASSERT_EQ(packed.size(), size_t(rows) + (size_t(rows) * cols + 1) / 2);
  ASSERT_TRUE(hypic::pic::fp8_encode_matrix(x.data(), rows, cols, packed.data()));
  for (float v : packed) EXPECT_TRUE(std::isfinite(v));
  std::vector<float> rounded = packed;
  hypic::store::round_in_place(DType::BF16, rounded.data(), rounded.size());
  EXPECT_EQ(std::memcmp(rounded.data(), packed.data(), packed.size() * sizeof(float)), 0);
  std::vector<float> back(x.size());
  ASSERT_EQ(hypic::pic::fp8_decode_matrix(packed.data(), rows, cols, back.data()), "");
  double err2 = 0, norm2 = 0;
  for (int r = 0; r < rows; ++r) {
    const double scale = std::ldexp(1.0, static_cast<int>(packed[r]));
    double amax = 0;
    for (int c = 0; c < cols; ++c)
      amax = std::max(amax, std::fabs(double(x[size_t(r) * cols + c])));
    EXPECT_LT(amax / scale, 240.0) << r;
    EXPECT_GE(amax / scale, 120.0) << r;
    for (int c = 0; c < cols; ++c) {
      const double v = x[size_t(r) * cols + c], d = std::fabs(v - back[size_t(r) * cols + c]);
      EXPECT_LE(d, std::max(hypic::pic::kE4m3Unit * std::fabs(v), std::ldexp(scale, -10))) << r;
      EXPECT_LE(d, hypic::pic::kE4m3Unit * amax) << r;
      err2 += d * d;
      norm2 += v * v;
    }
  }
  // Measured: the relative error is about a third of the unit (uniform rounding).
  EXPECT_LT(std::sqrt(err2 / norm2), hypic::pic::kE4m3Unit);
  EXPECT_GT(std::sqrt(err2 / norm2), 0.0);
}

// A zero row encodes exactly (scale 2⁰); a row with a NaN or an infinity cannot be encoded, and
// such a head keeps its T dense and its S as stored; damaged packed values are refused.
TEST(EntryForms, Fp8ZeroRowsAreExactNonFiniteRowsStayUnencoded) {
  const int dk = 8, dv = 8;
  std::vector<float> x(size_t(dk) * dv, 0.0f), back(x.size(), 1.0f);
  std::vector<float> packed(static_cast<size_t>(hypic::pic::fp8_floats(dk, dv)));
  ASSERT_TRUE(hypic::pic::fp8_encode_matrix(x.data(), dk, dv, packed.data()));
  EXPECT_EQ(packed[0], 0.0f);
  ASSERT_EQ(hypic::pic::fp8_decode_matrix(packed.data(), dk, dv, back.data()), "");
  EXPECT_EQ(back, x);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    x[13] = bad;
    EXPECT_FALSE(hypic::pic::fp8_encode_matrix(x.data(), dk, dv, packed.data())) << bad;
  }
  // Damage: a packed value with low bits, an exponent that is no integer, a code past 240.
  std::vector<float> good(packed.size(), 0.0f);
  std::vector<float> damaged = good;
  damaged[dk] = 1.0000001f;
  EXPECT_NE(hypic::pic::fp8_decode_matrix(damaged.data(), dk, dv, back.data()), "");
  damaged = good;
  damaged[0] = 0.5f;
  EXPECT_NE(hypic::pic::fp8_decode_matrix(damaged.data(), dk, dv, back.data()), "");
  damaged = good;
  damaged[dk] = hypic::store::bf16_to_f32(0x7800);  // code 0x78 = 256: past the row's scale
  EXPECT_NE(hypic::pic::fp8_decode_matrix(damaged.data(), dk, dv, back.data()), "");

  // A summary with a NaN in head 0's T and an infinity in head 1's S: both kept as they are.
  LinearSummary s;
  s.structure = TStructure::Dense;
  s.heads = 2;
  s.dk = dk;
  s.dv = dv;
  s.t.assign(size_t(2) * dk * dk, 0.0f);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < dk; ++i) s.t[size_t(h) * dk * dk + size_t(i) * dk + i] = 0.9f;
  s.t[5] = NAN;
  std::mt19937 rng(2);
  s.s = random_matrix(rng, 2 * dk, dv);
  s.s[size_t(dk) * dv + 3] = INFINITY;
  const hypic::pic::PackedT p = hypic::pic::pack_t(s, 0.5, true);
  EXPECT_EQ(p.choices[0].form, HeadForm::Dense);
  EXPECT_FALSE(p.choices[1].s_fp8);
  EXPECT_TRUE(p.choices[0].s_fp8);  // head 0's S is finite: fp8 within 0.5
}

// The bound against the measured error with fp8 candidates: fp8 T is chosen where it is the
// smallest form whose measured ‖ΔT‖_F / (1 − τ) passes, fp8 S where ε_S leaves room; the
// composed state's error against the exact one, with the stationary history of (2), stays
// under each head's bound (ε_T + ε_S) and so under the tolerance.
TEST(EntryForms, Fp8FormsKeepTheComposedErrorUnderTheBound) {
  std::mt19937 rng(17);
  const int dk = 32, dv = 16, H = 12;
  LinearSummary s;
  s.structure = TStructure::Dense;
  s.heads = H;
  s.dk = dk;
  s.dv = dv;
  for (int h = 0; h < H; ++h) {
    const float g = h % 3 == 0 ? 0.9f : h % 3 == 1 ? 0.97f : 0.995f;
    const std::vector<float> t = delta_rule_t(rng, dk, 6 + 4 * (h % 4), g, g + 0.004f);
    s.t.insert(s.t.end(), t.begin(), t.end());
  }
  s.s = random_matrix(rng, H * dk, dv);
  int t_fp8 = 0, s_fp8 = 0;
  for (double tol : {0.05, 0.2, 1.0}) {
    const hypic::pic::PackedT p = hypic::pic::pack_t(s, tol, true);
    LinearSummary approx = s;
    ASSERT_EQ(hypic::pic::unpack_t(p.forms, p.packed, approx), "");
    if (!p.s_forms.empty()) {
      ASSERT_EQ(hypic::pic::unpack_s(p.s_forms, p.s_packed, approx), "");
    }
    const hypic::pic::PackedT dense_only = hypic::pic::pack_t(s, tol, false);
    for (int h = 0; h < H; ++h) {
      const HeadChoice& c = p.choices[h];
      t_fp8 += c.form == HeadForm::Fp8;
      s_fp8 += c.s_fp8;
      EXPECT_LE(c.bound, tol * (1 + 1e-12)) << h;
      // Never more elements than without fp8.
      EXPECT_LE(p.head_floats(h, dk) + hypic::pic::head_s_floats(c.s_fp8, dk, dv),
                dense_only.head_floats(h, dk) + int64_t(dk) * dv)
          << h;
      const auto head = [&](const std::vector<float>& v, size_t per) {
        return std::vector<float>(v.begin() + per * h, v.begin() + per * (h + 1));
      };
      const std::vector<float> t = head(s.t, size_t(dk) * dk),
                               that = head(approx.t, size_t(dk) * dk);
      const std::vector<float> s0 = head(s.s, size_t(dk) * dv),
                               s0hat = head(approx.s, size_t(dk) * dv);
      std::vector<float> ds(s0.size());
      for (size_t i = 0; i < ds.size(); ++i) ds[i] = s0[i] - s0hat[i];
      EXPECT_NEAR(fro(ds) / fro(s0), c.s_error, 1e-6) << h;
      if (c.t_norm >= 1) continue;
      // S_in: the stationary history Σ_k T^k S0 (200 segments); composed T̂·S_in + Ŝ0 against
      // T·S_in + S0.
      std::vector<float> sin(s0), term(s0);
      for (int k = 0; k < 200; ++k) {
        const std::vector<double> next = matmul(t, term, dk, dk, dv);
        term.assign(next.begin(), next.end());
        for (size_t i = 0; i < sin.size(); ++i) sin[i] += term[i];
      }
      const std::vector<double> exact = matmul(t, sin, dk, dk, dv),
                                got = matmul(that, sin, dk, dk, dv);
      std::vector<double> diff(exact.size());
      for (size_t i = 0; i < diff.size(); ++i) diff[i] = (exact[i] + s0[i]) - (got[i] + s0hat[i]);
      EXPECT_LE(fro(diff) / fro(s0), c.bound * (1 + 1e-5) + 1e-7) << h << " tol " << tol;
    }
  }
  EXPECT_GT(t_fp8, 0);  // the trials reach both fp8 forms
  EXPECT_GT(s_fp8, 0);
}

// An entry with fp8 T and S heads: composed as the dense product of its decoded arrays, within
// the tolerance of the exact entry's composition; through bf16 and f32 store files bit for
// bit; never chosen for an f16 store, whose rounding an fp8 entry refuses.
TEST(EntryForms, Fp8EntriesRoundTripThroughBf16AndF32StoresNotF16) {
  const auto& be = hypic::kernels::host_backend();
  hypic::model::Model model = pic_test::remembering_tiny_host_model("qwen3_5", 21);
  const auto& cfg = model.config();
  std::mt19937 rng(8);
  const std::vector<int32_t> tokens = pic_test::random_tokens(rng, 48, cfg.vocab_size);
  const hypic::pic::SegmentEntry exact = hypic::pic::compute_entry(model, tokens, 4);
  ASSERT_FALSE(exact.linear.empty());
  const double tol = 0.3;
  hypic::pic::SegmentEntry f16_entry = exact;
  hypic::pic::choose_entry_forms(f16_entry, tol, DType::F16);
  for (const auto& l : f16_entry.linear) {
    EXPECT_TRUE(l.s_forms.empty());
    for (size_t h = 0; h < l.t_forms.size(); h += 2)
      EXPECT_NE(l.t_forms[h], static_cast<float>(HeadForm::Fp8));
  }
  hypic::pic::SegmentEntry e = exact;
  hypic::pic::FormTally tally;
  hypic::pic::choose_entry_forms(e, tol, DType::BF16, &tally);
  EXPECT_GT(tally.s_fp8_heads, 0);
  ASSERT_FALSE(e.linear[0].s_forms.empty());
  // Composition: within the tolerance of the exact entry's (head bounds ≤ tol, S_in random).
  const int H = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
            dv = cfg.linear_value_head_dim;
  std::vector<float> state = random_matrix(rng, H * dk, dv);
  for (size_t l = 0; l < e.linear.size(); ++l) {
    std::vector<float> a = state, b = state;
    hypic::pic::apply(be, e.linear[l].summary, a.data());
    hypic::pic::apply(be, exact.linear[l].summary, b.data());
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    // Per head ‖ΔT‖₂ ≤ tol and ‖ΔS0‖_F ≤ tol·‖S0‖_F.
    EXPECT_LE(fro(d), tol * (fro(exact.linear[l].summary.s) + fro(state))) << l;
    EXPECT_GT(fro(d), 0.0) << l;
  }
  EXPECT_THROW(
      {
        hypic::pic::SegmentEntry copy = e;
        hypic::pic::round_to_dtype(copy, DType::F16);
      },
      hypic::Error);
  EXPECT_NE(hypic::pic::fp8_store_problem(hypic::pic::to_store_entry(e), DType::F16), "");
  EXPECT_EQ(hypic::pic::fp8_store_problem(hypic::pic::to_store_entry(e), DType::BF16), "");
  for (DType dt : {DType::BF16, DType::F32}) {
    hypic::pic::SegmentEntry stored = e;
    hypic::pic::round_to_dtype(stored, dt);
    test_util::TempPath path("entry-forms-fp8-store");
    hypic::store::StoreOptions so;
    so.model_fingerprint = "entry-forms-fp8";
    so.junction = 4;
    so.dtype = dt;
    {
      hypic::store::SegmentStore st = hypic::store::SegmentStore::create(path.str(), so);
      st.put(st.key_for(tokens), hypic::pic::store_view(stored));
    }
    hypic::store::SegmentStore st = hypic::store::SegmentStore::open(
        path.str(), so.model_fingerprint, 4, hypic::store::OpenMode::kRead);
    hypic::store::Entry raw = *st.get(st.key_for(tokens));
    EXPECT_EQ(raw.arrays.count("linear/0/S"), 0u);
    EXPECT_EQ(raw.arrays.at("linear/0/Sform").numel(), 4 * H);
    const hypic::pic::SegmentEntry back = hypic::pic::from_store_entry(std::move(raw), cfg, 4);
    ASSERT_EQ(back.linear.size(), stored.linear.size());
    for (size_t l = 0; l < stored.linear.size(); ++l) {
      EXPECT_EQ(back.linear[l].summary.s, stored.linear[l].summary.s) << l;
      EXPECT_EQ(back.linear[l].summary.t, stored.linear[l].summary.t) << l;
      EXPECT_EQ(back.linear[l].s_packed, stored.linear[l].s_packed) << l;
      EXPECT_EQ(back.linear[l].t_packed, stored.linear[l].t_packed) << l;
    }
  }
}

TEST(EntryForms, UnpackRefusesInconsistentStateForms) {
  LinearSummary s;
  s.heads = 2;
  s.dk = 4;
  s.dv = 2;
  const std::vector<float> full(16, 0.5f);
  EXPECT_EQ(hypic::pic::unpack_s({0, 0, 4, 2, 0, 0, 4, 2}, full, s), "");
  EXPECT_EQ(s.s, full);
  EXPECT_NE(hypic::pic::unpack_s({0, 0, 4, 2}, full, s), "");              // one head
  EXPECT_NE(hypic::pic::unpack_s({0, 0, 4, 2, 2, 1, 4, 2}, full, s), "");  // no form 2
  EXPECT_NE(hypic::pic::unpack_s({0, 0, 4, 2, 1, 0, 4, 2}, full, s), "");  // no packing
  EXPECT_NE(hypic::pic::unpack_s({0, 0, 4, 2, 0, 0, 2, 4}, full, s), "");  // dk, dv swapped
  EXPECT_NE(hypic::pic::unpack_s({0, 0, 4, 2, 1, 1, 4, 2}, full, s), "");  // 8 + 8 ≠ 16
  std::vector<float> mixed(8, 0.5f);
  mixed.resize(8 + 4 + 4, 0.0f);  // head 1: 4 exponents, 4 pairs
  EXPECT_EQ(hypic::pic::unpack_s({0, 0, 4, 2, 1, 1, 4, 2}, mixed, s), "");
  EXPECT_NE(hypic::pic::unpack_t({5, 0, 0, 0}, std::vector<float>(4 + 8), s), "");  // packing 0
  EXPECT_EQ(hypic::pic::unpack_t({5, 1, 0, 0}, std::vector<float>(4 + 8), s), "");  // fp8 T: dense
  EXPECT_EQ(s.structure, TStructure::Dense);
}

// A layer with one head in every form composes head by head (compose_packed: absent as the
// segment's own state, scalar and diagonal element-wise, low rank as two thin products, dense
// as one, fp8 decoded into scratch) as the dense product of its unpacked T does; a Tpack of the
// wrong length is refused.
TEST(EntryForms, ComposesEachHeadInItsOwnForm) {
  const auto& be = hypic::kernels::host_backend();
  std::mt19937 rng(23);
  const int H = 6, dk = 16, dv = 8;
  std::vector<float> forms = {0, 0, 1, 0, 2, 0, 3, 2, 4, 0, 5, hypic::pic::kFp8PackBf16};
  std::vector<float> packed = {0.4f};
  const std::vector<float> d = random_matrix(rng, 1, dk, 0.5f);
  packed.insert(packed.end(), d.begin(), d.end());
  const std::vector<float> wy = random_matrix(rng, 1, dk + 2 * 2 * dk, 0.3f);
  packed.insert(packed.end(), wy.begin(), wy.end());
  const std::vector<float> dense = random_matrix(rng, dk, dk, 0.2f);
  packed.insert(packed.end(), dense.begin(), dense.end());
  const std::vector<float> t8 = random_matrix(rng, dk, dk, 0.2f);
  std::vector<float> q(static_cast<size_t>(hypic::pic::fp8_floats(dk, dk)));
  ASSERT_TRUE(hypic::pic::fp8_encode_matrix(t8.data(), dk, dk, q.data()));
  packed.insert(packed.end(), q.begin(), q.end());
  LinearSummary s;
  s.heads = H;
  s.dk = dk;
  s.dv = dv;
  s.s = random_matrix(rng, H * dk, dv);
  ASSERT_EQ(hypic::pic::unpack_t(forms, packed, s), "");
  ASSERT_EQ(s.structure, TStructure::Dense);
  const std::vector<float> state = random_matrix(rng, H * dk, dv);
  std::vector<float> via_dense = state, via_heads = state;
  hypic::pic::apply(be, s, via_dense.data());
  ASSERT_EQ(hypic::pic::compose_packed(forms, packed, H, dk, dv, s.s.data(), via_heads.data()), "");
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_NEAR(via_heads[i], via_dense[i], 1e-5 * (1 + std::fabs(via_dense[i]))) << i;
  // Head 0 (absent) is the segment's own state exactly.
  for (int i = 0; i < dk * dv; ++i) EXPECT_EQ(via_heads[i], s.s[i]);
  std::vector<float> shorter(packed.begin(), packed.end() - 1), longer = packed;
  longer.push_back(0.0f);
  std::vector<float> x = state;
  EXPECT_NE(hypic::pic::compose_packed(forms, shorter, H, dk, dv, s.s.data(), x.data()), "");
  EXPECT_NE(hypic::pic::compose_packed(forms, longer, H, dk, dv, s.s.data(), x.data()), "");
}

}  // namespace entry_forms_test
}  // namespace
