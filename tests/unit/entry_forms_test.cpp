// Per-head forms of an entry's T (issue #47, src/pic/entry_forms.hpp): the SVD against a
// reference, the bound against the measured error, exactness at tolerance 0, each form through
// the store and back, an entry in today's layout still reading, and composition in the chosen
// forms against the dense product.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "pic/entry_forms.hpp"
#include "pic/segment_entry.hpp"
#include "pic_test_util.hpp"
#include "store/segment_store.hpp"
#include "temp_path.hpp"

namespace {
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
  const std::vector<float> forms = {static_cast<float>(static_cast<int>(c.form)),
                                    static_cast<float>(c.rank)};
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
  hypic::pic::choose_entry_forms(e, 1e-3, &tally);
  ASSERT_FALSE(e.linear[0].t_forms.empty());
  const std::vector<float>& f = e.linear[0].t_forms;
  EXPECT_EQ(f[0], 0.0f);  // absent
  EXPECT_EQ(f[2], 1.0f);  // scalar
  EXPECT_EQ(f[4], 2.0f);  // diagonal
  EXPECT_EQ(f[6], 3.0f);  // low rank
  EXPECT_EQ(f[7], 2.0f);  // of rank 2 (a 2×2 rotation block)
  EXPECT_EQ(tally.heads[0] + tally.heads[1] + tally.heads[2] + tally.heads[3] + tally.heads[4],
            static_cast<int64_t>(H) * static_cast<int64_t>(exact.linear.size()));

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
  hypic::pic::choose_entry_forms(old_layout, 0.0);
  ASSERT_TRUE(old_layout.linear[0].t_forms.empty());
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

}  // namespace
