// T·S composition on the host: (layer, head) pairs are independent, so they run in parallel
// (parallel.hpp), each with its products on its own thread, with per-item scratch carved from one
// buffer allocated per call. Dense and low-rank T go through BLAS products.
#include "hypic/kernels/compose.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "parallel.hpp"

namespace hypic::kernels {
namespace {

// Scratch floats one head needs to apply a summary in place.
size_t apply_scratch(const TransitionRef& s) {
  const size_t dkdv = static_cast<size_t>(s.dk) * s.dv;
  if (s.structure == TStructure::Dense) return dkdv;
  if (s.structure == TStructure::LowRank) return static_cast<size_t>(s.rank) * s.dv;
  return 0;
}

// One head: st ← T st + S0 (or st + S0 with addition).
void apply_head(const TransitionRef& s, int h, float* st, float* scratch, bool addition) {
  const int dk = s.dk, dv = s.dv;
  const size_t dkdv = static_cast<size_t>(dk) * dv;
  const float* s0 = s.s0 + dkdv * h;
  if (!addition) {
    switch (s.structure) {
      case TStructure::Scalar: {
        const float t = s.t[h];
        for (size_t i = 0; i < dkdv; ++i) st[i] *= t;
        break;
      }
      case TStructure::Diagonal: {
        const float* d = s.t + static_cast<size_t>(dk) * h;
        for (int c = 0; c < dk; ++c)
          for (int j = 0; j < dv; ++j) st[static_cast<size_t>(c) * dv + j] *= d[c];
        break;
      }
      case TStructure::Dense: {
        std::memcpy(scratch, st, sizeof(float) * dkdv);
        gemm(false, false, dk, dv, dk, 1.0f, s.t + static_cast<size_t>(dk) * dk * h, dk, scratch,
             dv, 0.0f, st, dv);
        break;
      }
      case TStructure::LowRank: {
        // T st = d ⊙ st − Xᵀ (Y st): two thin products of rank r.
        const size_t xy = static_cast<size_t>(s.rank) * dk * h;
        gemm(false, false, s.rank, dv, dk, 1.0f, s.y + xy, dk, st, dv, 0.0f, scratch, dv);
        const float* d = s.t + static_cast<size_t>(dk) * h;
        for (int c = 0; c < dk; ++c)
          for (int j = 0; j < dv; ++j) st[static_cast<size_t>(c) * dv + j] *= d[c];
        gemm(true, false, dk, dv, s.rank, -1.0f, s.x + xy, dk, scratch, dv, 1.0f, st, dv);
        break;
      }
    }
  }
  for (size_t i = 0; i < dkdv; ++i) st[i] += s0[i];
}
}  // namespace

void compose_states(const TransitionRef* sums, float* const* states, int n, bool addition) {
  // Flatten (layer, head) into one index space; scratch offsets per item.
  std::vector<int> first(static_cast<size_t>(n) + 1, 0);
  std::vector<size_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int l = 0; l < n; ++l) {
    first[l + 1] = first[l] + sums[l].heads;
    offset[l + 1] = offset[l] + (addition ? 0 : apply_scratch(sums[l]) * sums[l].heads);
  }
  std::vector<float> scratch(std::max<size_t>(1, offset.back()));
  const int* fp = first.data();
  const size_t* op = offset.data();
  float* sc = scratch.data();
  const int64_t work = n > 0 ? int64_t(sums[0].dk) * sums[0].dv * sums[0].dk : 0;
  host::parallel_for(first.back(), work, [=](const int64_t item) {
    const int l = static_cast<int>(std::upper_bound(fp, fp + n + 1, item) - fp) - 1;
    const TransitionRef& s = sums[l];
    const int h = item - fp[l];
    float* st = states[l] + static_cast<size_t>(s.dk) * s.dv * h;
    apply_head(s, h, st, sc + op[l] + apply_scratch(s) * h, addition);
  });
}

}  // namespace hypic::kernels
