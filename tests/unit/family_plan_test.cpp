// The planned linear-attention family (kernels/include/.../family_plan.hpp: batched products
// plus element-wise and scan steps, the sequence the CUDA backend runs on tensor cores) run on
// the host, against the per-head chunk engine (kernels::family_chunked, the host backend's
// path) and the double-precision token recurrence (op_reference.hpp), for every member at
// awkward shapes: T below the chunk, T not a multiple of it, dk ≠ dv, grouped key heads; with
// and without outputs; the transition T and the state S(·|0) from the same pass; the low-rank
// export. Also the tensor-core numerics (bf16 operands, f32 accumulation) emulated on the CPU
// against the bound the op harness holds the CUDA backend to, and the FLOP count the
// TensorCoreShare test uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hypic/kernels/family_plan.hpp"
#include "hypic/kernels/linear_family.hpp"
#include "op_reference.hpp"

namespace {
namespace family_plan_test {
namespace kn = hypic::kernels;
namespace plan = hypic::kernels::family_plan;
namespace ref = hypic::ref;
using ref::Vec;

// The op harness's tolerance for the family in f32, and its bound on tensor cores
// (backend_ops_test.cpp, kFamilyBf16Tolerance), both relative to max(1, max |ref|).
constexpr double kF32Tol = 2e-5;
constexpr double kBf16Tol = 2e-2;

struct Case {
  kn::Member m;
  int T, Hk, Hv, dk, dv, chunk;
};

// The op harness's inputs (op_reference.hpp) for a case.
ref::FamilyData make(const Case& cs, std::mt19937& rng) {
  return ref::family_data(cs.m, {cs.T, cs.Hk, cs.Hv, cs.dk, cs.dv}, rng);
}

kn::FamilyInputs inputs(const ref::FamilyData& d) {
  return {d.q.data(), d.k.data(), d.v.data(), d.g.empty() ? nullptr : d.g.data(),
          d.beta.empty() ? nullptr : d.beta.data()};
}

// max |got − want| / max(1, max |want|)
double rel_err(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 1.0, err = 0.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(double(want[i])));
    const double e = std::fabs(double(got[i]) - double(want[i]));
    if (!(e <= err)) err = e;  // NaN too
  }
  return err / scale;
}

std::vector<Case> awkward_cases() {
  std::vector<Case> cases;
  for (kn::Member m : ref::kFamilyMembers) {
    cases.push_back({m, 1, 1, 2, 48, 80, 64});    // one token
    cases.push_back({m, 23, 2, 2, 48, 80, 64});   // T below the chunk
    cases.push_back({m, 64, 1, 4, 24, 16, 64});   // exactly one chunk, dk > dv, GQA 4
    cases.push_back({m, 130, 1, 2, 48, 80, 64});  // two chunks and a 2-token tail
    cases.push_back({m, 37, 1, 1, 16, 40, 8});    // small chunks: 4 full and a tail of 5
  }
  return cases;
}

std::string name(const Case& c) {
  return std::string(kn::member_name(c.m)) + " T=" + std::to_string(c.T) +
         " Hk=" + std::to_string(c.Hk) + " Hv=" + std::to_string(c.Hv) +
         " dk=" + std::to_string(c.dk) + " dv=" + std::to_string(c.dv) +
         " chunk=" + std::to_string(c.chunk);
}

TEST(FamilyPlan, MatchesTheChunkEngineAndTheRecurrenceForEveryMember) {
  std::mt19937 rng(45);
  for (const Case& cs : awkward_cases()) {
    const ref::FamilyData d = make(cs, rng);
    const kn::FamilySpec s = kn::member_spec(cs.m);
    const kn::FamilyDims dims{cs.T, cs.Hk, cs.Hv, cs.dk, cs.dv};
    const size_t tsize =
        size_t(kn::transition_floats_per_head(kn::natural_structure(s), cs.dk)) * cs.Hv;
    Vec st_plan = d.state, st_eng = d.state, out_plan(size_t(cs.T) * cs.Hv * cs.dv, -7.0f),
        out_eng(out_plan.size()), tr_plan(tsize, -7.0f), tr_eng(tsize);
    plan::family_chunked_planned(s, dims, inputs(d), st_plan.data(), out_plan.data(),
                                 tr_plan.data(), cs.chunk);
    kn::family_chunked(s, dims, inputs(d), st_eng.data(), out_eng.data(), tr_eng.data(), cs.chunk);
    Vec st_ref = d.state, out_ref, tr_ref;
    ref::family(d.c, d.q, d.k, d.v, d.g, d.beta, st_ref, out_ref, tr_ref);
    const Vec tr_nat = ref::natural_transition(d.c, tr_ref);
    const std::string w = name(cs);
    EXPECT_LE(rel_err(out_plan, out_ref), kF32Tol) << w << " out vs recurrence";
    EXPECT_LE(rel_err(st_plan, st_ref), kF32Tol) << w << " state vs recurrence";
    EXPECT_LE(rel_err(tr_plan, tr_nat), kF32Tol) << w << " transition vs recurrence";
    EXPECT_LE(rel_err(out_plan, out_eng), kF32Tol) << w << " out vs chunk engine";
    EXPECT_LE(rel_err(st_plan, st_eng), kF32Tol) << w << " state vs chunk engine";
    EXPECT_LE(rel_err(tr_plan, tr_eng), kF32Tol) << w << " transition vs chunk engine";

    // S(·|0) and T without outputs (the warm-up's summary pass): the same state and
    // transition from a zero initial state.
    Vec s0_plan(d.state.size(), 0.0f), s0_ref(d.state.size(), 0.0f), tr0(tsize, -7.0f), o0, t0;
    plan::family_chunked_planned(s, dims, inputs(d), s0_plan.data(), nullptr, tr0.data(), cs.chunk);
    ref::family(d.c, d.q, d.k, d.v, d.g, d.beta, s0_ref, o0, t0);
    EXPECT_LE(rel_err(s0_plan, s0_ref), kF32Tol) << w << " S(.|0) without outputs";
    EXPECT_LE(rel_err(tr0, tr_nat), kF32Tol) << w << " transition without outputs";
  }
}

TEST(FamilyPlan, EmptySegmentLeavesTheStateAndGivesTheIdentity) {
  for (kn::Member m : {kn::Member::GatedDeltaNet, kn::Member::GLA}) {
    const kn::FamilySpec s = kn::member_spec(m);
    const int dk = 4, dv = 3;
    Vec state(size_t(dk) * dv, 0.5f),
        tr(size_t(kn::transition_floats_per_head(kn::natural_structure(s), dk)), -7.0f);
    plan::family_chunked_planned(s, {0, 1, 1, dk, dv}, {}, state.data(), nullptr, tr.data(), 64);
    for (float x : state) EXPECT_EQ(x, 0.5f);
    for (size_t i = 0; i < tr.size(); ++i)
      EXPECT_EQ(tr[i], !s.delta || i / dk == i % dk ? 1.0f : 0.0f) << kn::member_name(m) << i;
  }
}

TEST(FamilyPlan, LowRankExportMatchesTheRecurrence) {
  std::mt19937 rng(46);
  for (kn::Member m : {kn::Member::DeltaNet, kn::Member::GatedDeltaNet, kn::Member::KDA})
    for (int T : {1, 7, 23})
      for (int ratio : {1, 2}) {
        const Case cs{m, T, 1, ratio, 48, 80, 64};
        const ref::FamilyData d = make(cs, rng);
        const int Hv = ratio, dk = 48;
        Vec state = d.state, out(size_t(T) * Hv * 80), td(size_t(Hv) * dk), x(size_t(Hv) * T * dk),
            y(x.size());
        plan::family_chunked_lowrank_planned(kn::member_spec(m), {T, 1, Hv, dk, 80}, inputs(d),
                                             state.data(), out.data(), td.data(), x.data(),
                                             y.data());
        Vec st_ref = d.state, out_ref, tr_ref;
        ref::family(d.c, d.q, d.k, d.v, d.g, d.beta, st_ref, out_ref, tr_ref);
        Vec got(tr_ref.size());
        for (int h = 0; h < Hv; ++h)
          for (int i = 0; i < dk; ++i)
            for (int j = 0; j < dk; ++j) {
              double acc = i == j ? td[size_t(h) * dk + i] : 0.0;
              for (int r = 0; r < T; ++r)
                acc -= double(x[(size_t(h) * T + r) * dk + i]) * y[(size_t(h) * T + r) * dk + j];
              got[(size_t(h) * dk + i) * dk + j] = float(acc);
            }
        const std::string w = name(cs);
        EXPECT_LE(rel_err(out, out_ref), kF32Tol) << w << " out";
        EXPECT_LE(rel_err(state, st_ref), kF32Tol) << w << " state";
        EXPECT_LE(rel_err(got, tr_ref), kF32Tol) << w << " diag(d) - X^T Y";
      }
}

// Strong per-channel decays (log decay in (−6, −2): b falls to about −250 over a chunk of 64,
// e^{250} far past f32's range): the sub-block products keep every factor ≤ 1, so nothing
// overflows, and the plan matches the recurrence; also in bf16.
TEST(FamilyPlan, StrongPerChannelDecaysStayFinite) {
  std::mt19937 rng(48);
  for (kn::Member m : {kn::Member::GLA, kn::Member::KDA}) {
    const Case cs{m, 130, 1, 2, 48, 80, 64};
    ref::FamilyData d = make(cs, rng);
    d.g = ref::uniform(size_t(cs.T) * cs.Hv * cs.dk, rng, -6.0f, -2.0f);
    const kn::FamilySpec s = kn::member_spec(m);
    const size_t tsize =
        size_t(kn::transition_floats_per_head(kn::natural_structure(s), cs.dk)) * cs.Hv;
    Vec st_ref = d.state, out_ref, tr_ref;
    ref::family(d.c, d.q, d.k, d.v, d.g, d.beta, st_ref, out_ref, tr_ref);
    for (bool bf16 : {false, true}) {
      Vec st = d.state, out(size_t(cs.T) * cs.Hv * cs.dv), tr(tsize);
      plan::family_chunked_planned(s, {cs.T, cs.Hk, cs.Hv, cs.dk, cs.dv}, inputs(d), st.data(),
                                   out.data(), tr.data(), cs.chunk, bf16);
      const double tol = bf16 ? kBf16Tol : kF32Tol;
      const std::string w = name(cs) + (bf16 ? " bf16" : " f32");
      EXPECT_LE(rel_err(out, out_ref), tol) << w << " out";
      EXPECT_LE(rel_err(st, st_ref), tol) << w << " state";
      EXPECT_LE(rel_err(tr, ref::natural_transition(d.c, tr_ref)), tol) << w << " transition";
    }
  }
}

// The tensor-core numerics (every product operand rounded to bf16, f32 accumulation) within
// kBf16Tol of the recurrence, the bound the op harness applies to the CUDA backend; and
// farther than f32's tolerance, so the rounding did happen.
TEST(FamilyPlan, Bf16OperandsStayWithinTheTensorCoreBound) {
  std::mt19937 rng(47);
  double worst = 0.0, least = 1.0;
  for (const Case& cs : awkward_cases()) {
    if (cs.T == 1) continue;
    const ref::FamilyData d = make(cs, rng);
    const kn::FamilySpec s = kn::member_spec(cs.m);
    const size_t tsize =
        size_t(kn::transition_floats_per_head(kn::natural_structure(s), cs.dk)) * cs.Hv;
    Vec st = d.state, out(size_t(cs.T) * cs.Hv * cs.dv), tr(tsize);
    plan::family_chunked_planned(s, {cs.T, cs.Hk, cs.Hv, cs.dk, cs.dv}, inputs(d), st.data(),
                                 out.data(), tr.data(), cs.chunk, true);
    Vec st_ref = d.state, out_ref, tr_ref;
    ref::family(d.c, d.q, d.k, d.v, d.g, d.beta, st_ref, out_ref, tr_ref);
    const double e = std::max({rel_err(out, out_ref), rel_err(st, st_ref),
                               rel_err(tr, ref::natural_transition(d.c, tr_ref))});
    EXPECT_LE(e, kBf16Tol) << name(cs);
    worst = std::max(worst, e);
    least = std::min(least, e);
  }
  std::printf("bf16-operand plan vs the recurrence: largest error %.3g, smallest %.3g\n", worst,
              least);
  EXPECT_GT(least, 10 * kF32Tol) << "the bf16 emulation did not round";
}

// The device check's real-shape family cases (backend_real_shapes_test.cpp: T = 4096,
// dk = dv = 128, chunk 64, the device against the host backend within 2e-2), with two value
// heads and the tensor-core numerics emulated: 64 chunks of bf16 operands stay inside that
// tolerance.
TEST(FamilyPlan, Bf16OperandsAtTheRealShapeStayWithinItsTolerance) {
  std::mt19937 rng(49);
  for (kn::Member m : {kn::Member::GatedDeltaNet, kn::Member::KDA, kn::Member::Lightning}) {
    const Case cs{m, 4096, m == kn::Member::GatedDeltaNet ? 1 : 2, 2, 128, 128, 64};
    const ref::FamilyData d = make(cs, rng);
    const kn::FamilySpec s = kn::member_spec(m);
    const kn::FamilyDims dims{cs.T, cs.Hk, cs.Hv, cs.dk, cs.dv};
    const size_t tsize =
        size_t(kn::transition_floats_per_head(kn::natural_structure(s), cs.dk)) * cs.Hv;
    Vec st = d.state, out(size_t(cs.T) * cs.Hv * cs.dv), tr(tsize);
    Vec st_h = d.state, out_h(out.size()), tr_h(tsize);
    plan::family_chunked_planned(s, dims, inputs(d), st.data(), out.data(), tr.data(), 64, true);
    kn::family_chunked(s, dims, inputs(d), st_h.data(), out_h.data(), tr_h.data(), 64);
    const double e = std::max({rel_err(out, out_h), rel_err(st, st_h), rel_err(tr, tr_h)});
    std::printf("bf16-operand plan vs the host engine, %s T=4096 dk=dv=128: %.3g\n",
                kn::member_name(m), e);
    EXPECT_LE(e, 2e-2) << name(cs);
  }
}

// The planned steps refuse what the chunk engine refuses, with its message (both call
// check_family_inputs; BackendOps.FamilyRefusesBadCalls lists the messages).
TEST(FamilyPlan, RefusesWhatTheChunkEngineRefuses) {
  const int T = 3, dk = 4, dv = 4;
  Vec in(size_t(T) * 2 * dk, 0.5f), state(size_t(2) * dk * dv), out(size_t(T) * 2 * dv),
      tr(size_t(2) * dk * dk), td(size_t(2) * dk), x(size_t(2) * T * dk), y(x.size());
  const float* p = in.data();
  const kn::FamilySpec s = kn::member_spec(kn::Member::KDA);
  const struct {
    kn::FamilyDims d;
    kn::FamilyInputs in;
  } bad[] = {{{T, 2, 3, dk, dv}, {p, p, p, p, p}},
             {{T, 1, 2, dk, dv}, {p, nullptr, p, p, p}},
             {{T, 1, 2, dk, dv}, {p, p, p, nullptr, p}},
             {{T, 1, 2, dk, dv}, {p, p, p, p, nullptr}}};
  for (const auto& b : bad) {
    const std::string engine = ref::refusal(
        [&] { kn::family_chunked(s, b.d, b.in, state.data(), out.data(), tr.data(), 64); });
    EXPECT_EQ(engine.rfind("linear family: ", 0), 0u) << engine;
    EXPECT_EQ(ref::refusal([&] {
                plan::family_chunked_planned(s, b.d, b.in, state.data(), out.data(), tr.data(), 64);
              }),
              engine);
    EXPECT_EQ(ref::refusal([&] {
                plan::family_chunked_lowrank_planned(s, b.d, b.in, state.data(), out.data(),
                                                     td.data(), x.data(), y.data());
              }),
              engine);
  }
}

// The plan's FLOPs: for a non-delta member over whole chunks, exactly the count the roofline
// uses, 2·(2·dk·dv + C·(dk + dv)) per token and value head, all in products.
TEST(FamilyPlan, FlopCountOfTheProducts) {
  const kn::FamilyDims d{4096, 64, 64, 128, 128};
  const plan::Flops f = plan::flops(
      plan::make_plan(kn::member_spec(kn::Member::Lightning), d, true, false, 64, false));
  EXPECT_DOUBLE_EQ(f.products, 2.0 * (2 * 128 * 128 + 64 * 256) * 64 * 4096);
  EXPECT_GT(f.steps, 0.0);
  EXPECT_LT(f.steps, 0.02 * f.products);
  // Delta rule: products 2·(3·dk·dv + C·(3·dk + 2·dv)) (KK, QK, Mb V, Mb K_d, W S, K_tᵀ U,
  // Q_d S, QK U), the transition 4·dk² more.
  const plan::Flops g = plan::flops(
      plan::make_plan(kn::member_spec(kn::Member::GatedDeltaNet), d, true, true, 64, false));
  EXPECT_DOUBLE_EQ(
      g.products, (2.0 * (3 * 128 * 128 + 64 * (3 * 128 + 2 * 128)) + 4.0 * 128 * 128) * 64 * 4096);
}

}  // namespace family_plan_test
}  // namespace
