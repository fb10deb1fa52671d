// Segment summaries of linear-attention layers: build, apply, chain, convert, re-rotate.
// The products and the composition are backend ops (the backend's compose_states covers all
// layers and heads in one launch); chaining low-rank forms loops over heads here, one Kokkos
// parallel_for over the host execution space (the summaries are host arrays).
#include "pic/linear_summary.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hypic::pic {
namespace {
using HostExec = Kokkos::DefaultHostExecutionSpace;

int64_t t_floats(const LinearSummary& s) {
  return kernels::transition_floats_per_head(s.structure, s.dk, s.rank);
}

void check_same_shape(const LinearSummary& a, const LinearSummary& b) {
  if (a.heads != b.heads || a.dk != b.dk || a.dv != b.dv)
    throw std::invalid_argument("linear summary: shapes differ");
}

int structure_level(TStructure s) {
  switch (s) {
    case TStructure::Scalar:
      return 0;
    case TStructure::Diagonal:
      return 1;
    case TStructure::LowRank:
      return 2;
    case TStructure::Dense:
      return 3;
  }
  return 3;
}

// Chains two low-rank transitions without densifying (see docs/linear-family.md):
// (D2 − X2ᵀY2)(D1 − X1ᵀY1) = D2D1 − [X1 D2; X2]ᵀ [Y1; Y2 D1 − (Y2 X1ᵀ) Y1].
void chain_lowrank_t(const kernels::Backend& be, const LinearSummary& a, const LinearSummary& b,
                     LinearSummary& r) {
  const int dk = a.dk, r1 = a.rank, r2 = b.rank, rr = r1 + r2;
  r.rank = rr;
  r.t.assign(static_cast<size_t>(a.heads) * dk, 0.0f);
  r.x.assign(static_cast<size_t>(a.heads) * rr * dk, 0.0f);
  r.y.assign(r.x.size(), 0.0f);
  std::vector<float> scratch(static_cast<size_t>(a.heads) * std::max(1, r2 * r1));
  float* sc = scratch.data();
  Kokkos::parallel_for(
      "pic_chain_lowrank", Kokkos::RangePolicy<HostExec>(0, a.heads), [&, sc](const int h) {
        const float* d1 = a.t.data() + static_cast<size_t>(dk) * h;
        const float* d2 = b.t.data() + static_cast<size_t>(dk) * h;
        const float* x1 = a.x.data() + static_cast<size_t>(r1) * dk * h;
        const float* y1 = a.y.data() + static_cast<size_t>(r1) * dk * h;
        const float* x2 = b.x.data() + static_cast<size_t>(r2) * dk * h;
        const float* y2 = b.y.data() + static_cast<size_t>(r2) * dk * h;
        float* d = r.t.data() + static_cast<size_t>(dk) * h;
        float* x = r.x.data() + static_cast<size_t>(rr) * dk * h;
        float* y = r.y.data() + static_cast<size_t>(rr) * dk * h;
        for (int c = 0; c < dk; ++c) d[c] = d1[c] * d2[c];
        for (int i = 0; i < r1; ++i)
          for (int c = 0; c < dk; ++c) {
            x[static_cast<size_t>(i) * dk + c] = x1[static_cast<size_t>(i) * dk + c] * d2[c];
            y[static_cast<size_t>(i) * dk + c] = y1[static_cast<size_t>(i) * dk + c];
          }
        float* x_new = x + static_cast<size_t>(r1) * dk;
        float* y_new = y + static_cast<size_t>(r1) * dk;
        std::memcpy(x_new, x2, sizeof(float) * r2 * dk);
        for (int i = 0; i < r2; ++i)
          for (int c = 0; c < dk; ++c)
            y_new[static_cast<size_t>(i) * dk + c] = y2[static_cast<size_t>(i) * dk + c] * d1[c];
        float* m = sc + static_cast<size_t>(r2) * r1 * h;  // Y2 X1ᵀ [r2, r1]
        be.gemm(false, true, r2, r1, dk, 1.0f, y2, dk, x1, dk, 0.0f, m, r1);
        be.gemm(false, false, r2, dk, r1, -1.0f, m, r1, y1, dk, 1.0f, y_new, dk);
      });
  Kokkos::fence();
}

}  // namespace

const char* structure_name(TStructure s) {
  switch (s) {
    case TStructure::Scalar:
      return "scalar";
    case TStructure::Diagonal:
      return "diagonal";
    case TStructure::Dense:
      return "dense";
    case TStructure::LowRank:
      return "lowrank";
  }
  return "?";
}

// Both bytes and apply flops favour the WY form while 2·r·dk < dk², i.e. r < dk/2; the
// measurements in docs/linear-family.md put the apply-time crossover at the same place.
int lowrank_max_tokens(int dk) {
  return dk / 2 - 1;
}

size_t summary_bytes(TStructure st, int heads, int dk, int dv, int rank, DType dt) {
  const size_t per_head = static_cast<size_t>(kernels::transition_floats_per_head(st, dk, rank)) +
                          static_cast<size_t>(dk) * dv;
  return per_head * heads * dtype_size(dt);
}

size_t LinearSummary::bytes(DType dt) const {
  return summary_bytes(structure, heads, dk, dv, rank, dt);
}

LinearSummary summarize(const kernels::Backend& be, const FamilySpec& spec, const FamilyDims& d,
                        const FamilyInputs& in, float* out, TForm form, int chunk) {
  LinearSummary r;
  r.heads = d.Hv;
  r.dk = d.dk;
  r.dv = d.dv;
  r.tokens = d.T;
  r.s.assign(static_cast<size_t>(d.Hv) * d.dk * d.dv, 0.0f);
  const bool lowrank =
      spec.delta && d.T > 0 &&
      (form == TForm::LowRank || (form == TForm::Auto && d.T <= lowrank_max_tokens(d.dk)));
  if (form == TForm::LowRank && !spec.delta)
    throw std::invalid_argument("summarize: the low-rank form is for delta-rule members");
  if (lowrank) {
    r.structure = TStructure::LowRank;
    r.rank = d.T;
    r.t.assign(static_cast<size_t>(d.Hv) * d.dk, 0.0f);
    r.x.assign(static_cast<size_t>(d.Hv) * d.T * d.dk, 0.0f);
    r.y.assign(r.x.size(), 0.0f);
    be.family_chunked_lowrank(spec, d, in, r.s.data(), out, r.t.data(), r.x.data(), r.y.data());
    return r;
  }
  r.structure = kernels::natural_structure(spec);
  r.t.assign(static_cast<size_t>(t_floats(r)) * d.Hv, 0.0f);
  be.family_chunked(spec, d, in, r.s.data(), out, r.t.data(), chunk);
  return r;
}

void apply(const kernels::Backend& be, const LinearSummary& sum, float* state) {
  apply_layers(be, {&sum}, {state}, false);
}

void apply_addition(const kernels::Backend& be, const LinearSummary& sum, float* state) {
  apply_layers(be, {&sum}, {state}, true);
}

double state_contribution(const kernels::Backend& be, const LinearSummary& sum,
                          const float* state_in) {
  std::vector<float> composed(state_in, state_in + sum.s.size());
  apply(be, sum, composed.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < composed.size(); ++i) {
    const double c = composed[i], t_s = c - static_cast<double>(sum.s[i]);
    num += t_s * t_s;
    den += c * c;
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

void apply_layers(const kernels::Backend& be, const std::vector<const LinearSummary*>& sums,
                  const std::vector<float*>& states, bool addition) {
  if (sums.size() != states.size())
    throw std::invalid_argument("apply_layers: one state per summary");
  std::vector<kernels::TransitionRef> refs(sums.size());
  for (size_t l = 0; l < sums.size(); ++l) {
    const LinearSummary& s = *sums[l];
    refs[l] = {s.structure, s.heads,    s.dk,       s.dv,      s.rank,
               s.t.data(),  s.x.data(), s.y.data(), s.s.data()};
  }
  be.compose_states(refs.data(), states.data(), static_cast<int>(refs.size()), addition);
}

LinearSummary convert(const kernels::Backend& be, const LinearSummary& sum, TStructure to) {
  if (sum.structure == to) return sum;
  const int H = sum.heads, dk = sum.dk;
  const bool widening = structure_level(to) > structure_level(sum.structure);
  if (!widening || to == TStructure::LowRank)
    throw std::invalid_argument(std::string("convert: cannot turn ") +
                                structure_name(sum.structure) + " into " + structure_name(to));
  LinearSummary r = sum;
  r.structure = to;
  r.rank = 0;
  r.x.clear();
  r.y.clear();
  r.t.assign(static_cast<size_t>(kernels::transition_floats_per_head(to, dk)) * H, 0.0f);
  for (int h = 0; h < H; ++h) {
    // Diagonal of the source (LowRank: its d part).
    auto diag = [&](int c) {
      return sum.structure == TStructure::Scalar ? sum.t[h]
                                                 : sum.t[static_cast<size_t>(dk) * h + c];
    };
    if (to == TStructure::Diagonal) {
      for (int c = 0; c < dk; ++c) r.t[static_cast<size_t>(dk) * h + c] = diag(c);
      continue;
    }
    float* t = r.t.data() + static_cast<size_t>(dk) * dk * h;
    for (int c = 0; c < dk; ++c) t[static_cast<size_t>(c) * dk + c] = diag(c);
    if (sum.structure == TStructure::LowRank && sum.rank > 0) {
      const size_t xy = static_cast<size_t>(sum.rank) * dk * h;
      be.gemm(true, false, dk, dk, sum.rank, -1.0f, sum.x.data() + xy, dk, sum.y.data() + xy, dk,
              1.0f, t, dk);
    }
  }
  return r;
}

LinearSummary chain(const kernels::Backend& be, const LinearSummary& first,
                    const LinearSummary& second) {
  check_same_shape(first, second);
  // Bring both to a common structure; two low-rank forms stay low rank while that is smaller.
  TStructure common = structure_level(first.structure) >= structure_level(second.structure)
                          ? first.structure
                          : second.structure;
  if (common == TStructure::LowRank &&
      (first.structure != TStructure::LowRank || second.structure != TStructure::LowRank ||
       first.rank + second.rank > lowrank_max_tokens(first.dk)))
    common = TStructure::Dense;
  const LinearSummary a = convert(be, first, common), b = convert(be, second, common);

  LinearSummary r;
  r.structure = common;
  r.heads = a.heads;
  r.dk = a.dk;
  r.dv = a.dv;
  r.tokens = a.tokens + b.tokens;
  r.s = a.s;
  apply(be, b, r.s.data());  // S = T2·S1 + S2
  const int H = a.heads, dk = a.dk;
  switch (common) {
    case TStructure::Scalar:
    case TStructure::Diagonal:
      r.t.resize(a.t.size());
      for (size_t i = 0; i < a.t.size(); ++i) r.t[i] = b.t[i] * a.t[i];
      break;
    case TStructure::Dense: {
      r.t.assign(a.t.size(), 0.0f);
      const int64_t dd = static_cast<int64_t>(dk) * dk;
      be.gemm_strided_batched(false, false, dk, dk, dk, 1.0f, b.t.data(), dk, dd, a.t.data(), dk,
                              dd, 0.0f, r.t.data(), dk, dd, H);
      break;
    }
    case TStructure::LowRank:
      chain_lowrank_t(be, a, b, r);
      break;
  }
  return r;
}

void rerotate(const kernels::Backend& be, LinearSummary& sum, const kernels::Rotary& rot,
              int64_t p) {
  const int H = sum.heads, dk = sum.dk, dv = sum.dv;
  if (sum.structure == TStructure::LowRank) {
    // R (D − XᵀY) Rᵀ = D − (X Rᵀ)ᵀ (Y Rᵀ) when D is equal on every rotary pair.
    bool uniform = true;
    for (int h = 0; h < H && uniform; ++h)
      for (int c = 1; c < dk && uniform; ++c)
        uniform = sum.t[static_cast<size_t>(dk) * h + c] == sum.t[static_cast<size_t>(dk) * h];
    if (!uniform) sum = convert(be, sum, TStructure::Dense);
  }
  if (sum.structure == TStructure::Diagonal) {
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < rot.rotary_dim / 2; ++i) {
        const int a = rot.interleaved ? 2 * i : i;
        const int b = rot.interleaved ? 2 * i + 1 : i + rot.rotary_dim / 2;
        if (sum.t[static_cast<size_t>(dk) * h + a] != sum.t[static_cast<size_t>(dk) * h + b])
          throw std::invalid_argument("rerotate: diagonal T differs within a rotary pair");
      }
  }
  for (int h = 0; h < H; ++h) {
    be.rotary_rotate_columns(rot, sum.s.data() + static_cast<size_t>(dk) * dv * h, dk, dv, p);
    if (sum.structure == TStructure::Dense) {
      float* t = sum.t.data() + static_cast<size_t>(dk) * dk * h;
      be.rotary_rotate_columns(rot, t, dk, dk, p);   // R T
      be.rotary_rotate_rows(rot, t, dk, dk, dk, p);  // (R T) Rᵀ: rotate each row
    } else if (sum.structure == TStructure::LowRank) {
      const size_t xy = static_cast<size_t>(sum.rank) * dk * h;
      be.rotary_rotate_rows(rot, sum.x.data() + xy, sum.rank, dk, dk, p);
      be.rotary_rotate_rows(rot, sum.y.data() + xy, sum.rank, dk, dk, p);
    }
  }
}

}  // namespace hypic::pic
