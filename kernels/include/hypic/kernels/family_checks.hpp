#pragma once
// The argument checks every entry point of the linear-attention family makes before it reads an
// input: the host chunk engine and recurrences (host/linear_family.cpp), the host run of the
// planned steps (host/family_plan.cpp) and the CUDA backend (cuda/family.cu), so that every
// path refuses exactly the same calls with the same message. Inline, like attention_checks.hpp:
// the CUDA module compiles it in instead of resolving it against the executable.
#include <stdexcept>

#include "hypic/kernels/linear_family.hpp"

namespace hypic::kernels {

// Positive head counts and sizes (T ≥ 0), Hv a multiple of Hk; with tokens, q, k and v, g for a
// decaying member and beta for a delta member.
inline void check_family_inputs(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in) {
  if (d.T < 0 || d.Hk <= 0 || d.Hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.Hv % d.Hk != 0)
    throw std::invalid_argument("linear family: bad dims (Hv must be a multiple of Hk)");
  if (d.T > 0 && (in.q == nullptr || in.k == nullptr || in.v == nullptr))
    throw std::invalid_argument("linear family: q, k, v required");
  if (d.T > 0 && s.decay != Decay::None && in.g == nullptr)
    throw std::invalid_argument("linear family: decaying member needs g");
  if (d.T > 0 && s.delta && in.beta == nullptr)
    throw std::invalid_argument("linear family: delta member needs beta");
}

}  // namespace hypic::kernels
