// T·S + S(C|0) on the device, one summary (layer) at a time and every head of it at once:
// dense and low-rank T as strided-batched cuBLAS products over the heads, scalar and diagonal
// T (and the addition ablation) as one element-wise kernel. The TransitionRef array and the
// state pointer array are host arrays; what they point to is device memory.
#include <stdexcept>

#include "ops.cuh"
#include "util.cuh"

namespace hypic::kernels::cuda {
namespace {

// st[h, c, j] ← f · st[h, c, j] + s0[h, c, j] with f = 1 (mode 0), t[h] (mode 1) or
// t[h·dk + c] (mode 2).
__global__ void scale_add_kernel(float* st, const float* t, const float* s0, int mode, int H,
                                 int dk, int dv) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(H) * dk * dv) return;
  const int64_t hc = i / dv;  // h · dk + c
  const float f = mode == 0 ? 1.0f : mode == 1 ? t[hc / dk] : t[hc];
  st[i] = f * st[i] + s0[i];
}

void scale_add(float* st, const float* t, const float* s0, int mode, int H, int dk, int dv) {
  const int64_t n = int64_t(H) * dk * dv;
  if (n == 0) return;
  scale_add_kernel<<<blocks_for(n), kThreads>>>(st, t, s0, mode, H, dk, dv);
  check_launch("compose_states");
}

}  // namespace

void compose_states(const TransitionRef* sums, float* const* states, int n, bool addition) {
  for (int i = 0; i < n; ++i) {
    const TransitionRef& s = sums[i];
    float* st = states[i];
    const int H = s.heads, dk = s.dk, dv = s.dv;
    const int64_t dkdv = int64_t(dk) * dv;
    if (H == 0 || dkdv == 0) continue;
    if (addition) {
      scale_add(st, nullptr, s.s0, 0, H, dk, dv);
      continue;
    }
    switch (s.structure) {
      case TStructure::Scalar:
        scale_add(st, s.t, s.s0, 1, H, dk, dv);
        break;
      case TStructure::Diagonal:
        scale_add(st, s.t, s.s0, 2, H, dk, dv);
        break;
      case TStructure::Dense: {
        // out_h = T_h · st_h + S0_h into scratch (beta 1 on a copy of S0), then back.
        Scratch out(sizeof(float) * size_t(H) * dkdv);
        check(cudaMemcpyAsync(out.as<float>(), s.s0, sizeof(float) * size_t(H) * dkdv,
                              cudaMemcpyDeviceToDevice, 0),
              "cudaMemcpyAsync (compose S0)");
        gemm_strided_batched(false, false, dk, dv, dk, 1.0f, s.t, dk, int64_t(dk) * dk, st, dv,
                             dkdv, 1.0f, out.as<float>(), dv, dkdv, H);
        check(cudaMemcpyAsync(st, out.as<float>(), sizeof(float) * size_t(H) * dkdv,
                              cudaMemcpyDeviceToDevice, 0),
              "cudaMemcpyAsync (compose result)");
        break;
      }
      case TStructure::LowRank: {
        // T st = d ⊙ st − Xᵀ (Y st): Y st first (it reads the old st), then the rest.
        if (s.rank <= 0) {
          scale_add(st, s.t, s.s0, 2, H, dk, dv);
          break;
        }
        const int64_t rdk = int64_t(s.rank) * dk, rdv = int64_t(s.rank) * dv;
        Scratch ys(sizeof(float) * size_t(H) * rdv);
        gemm_strided_batched(false, false, s.rank, dv, dk, 1.0f, s.y, dk, rdk, st, dv, dkdv, 0.0f,
                             ys.as<float>(), dv, rdv, H);
        scale_add(st, s.t, s.s0, 2, H, dk, dv);
        gemm_strided_batched(true, false, dk, dv, s.rank, -1.0f, s.x, dk, rdk, ys.as<float>(), dv,
                             rdv, 1.0f, st, dv, dkdv, H);
        break;
      }
    }
  }
}

}  // namespace hypic::kernels::cuda
