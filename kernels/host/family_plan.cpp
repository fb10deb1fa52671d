// The steps of family_plan.hpp on the host: the products with sgemm, one batch item per thread
// (parallel.hpp), the element-wise steps as parallel loops over their items, the solve one
// batch item per thread. Not the host backend's path (that is the per-head chunk engine of
// linear_family.cpp, the reference this plan is tested against): it exists so that the CPU
// tests run the step sequence of the CUDA backend, and, with bf16_products, its numerics.
#include "hypic/kernels/family_plan.hpp"

#include <memory>
#include <stdexcept>

#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/family_checks.hpp"
#include "parallel.hpp"

namespace hypic::kernels::family_plan {
namespace {

struct HostRun {
  Ctx<float> x;

  float* base(int buf) const {
    if (buf == STATE) return x.state;
    if (buf == TRANS) return x.trans;
    return product_typed(buf) ? x.b[buf] : x.f[buf];
  }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, Mat a, Mat b, float beta, Mat c,
            int batch) {
    const float* pa = base(a.buf) + a.offset;
    const float* pb = base(b.buf) + b.offset;
    float* pc = base(c.buf) + c.offset;
    const bool round = x.round && product_typed(c.buf);
    host::parallel_for(batch, int64_t(2) * m * n * k, [&](int64_t i) {
      float* ci = pc + i * c.stride;
      gemm_one(ta, tb, m, n, k, alpha, pa + i * a.stride, a.ld, pb + i * b.stride, b.ld, beta, ci,
               c.ld);
      if (round)
        for (int r = 0; r < m; ++r)
          for (int j = 0; j < n; ++j)
            ci[int64_t(r) * c.ld + j] = round_bf16(ci[int64_t(r) * c.ld + j]);
    });
  }
  static void gemm_one(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc) {
    kernels::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  void step(Step s, int chunk) {
    const int64_t n = items(x, s);
    if (s == Step::Solve) {
      const int C = x.p.C;
      host::parallel_for(n, int64_t(C) * C * C / 3, [&](int64_t bi) {
        float* m = x.f[KK] + bi * int64_t(C) * C;
        float* row = x.f[ROW] + bi * C;
        for (int r = 0; r < C; ++r) {
          for (int col = 0; col <= r; ++col) row[col] = solve_entry(x, bi, r, col);
          for (int col = 0; col <= r; ++col) m[int64_t(r) * C + col] = row[col];
        }
      });
      return;
    }
    const Ctx<float>& cx = x;
    host::parallel_for(n, 8, [&](int64_t i) { step_item(cx, s, chunk, i); });
  }
};

void run_host(const Plan& p, const FamilyInputs& in, float* state, float* out, float* trans,
              float* lr_d, float* lr_x, float* lr_y, bool bf16) {
  int64_t offsets[kBufs + 1];
  layout(p, sizeof(float), offsets);
  std::unique_ptr<float[]> scratch(new float[offsets[kBufs] / sizeof(float) + 1]);
  HostRun h{make_ctx<float>(p, in, state, out, trans, scratch.get(), offsets)};
  h.x.lr_d = lr_d;
  h.x.lr_x = lr_x;
  h.x.lr_y = lr_y;
  h.x.round = bf16;
  run(h, p);
}

}  // namespace

void family_chunked_planned(const FamilySpec& s, const FamilyDims& d, const FamilyInputs& in,
                            float* state, float* out, float* transition, int chunk,
                            bool bf16_products) {
  check_family_inputs(s, d, in);
  if (chunk <= 0) throw std::invalid_argument("family_chunked: chunk must be positive");
  const Plan p = make_plan(s, d, out != nullptr, transition != nullptr, chunk, false);
  run_host(p, in, state, out, transition, nullptr, nullptr, nullptr, bf16_products);
}

void family_chunked_lowrank_planned(const FamilySpec& s, const FamilyDims& d,
                                    const FamilyInputs& in, float* state, float* out, float* tdiag,
                                    float* x, float* y, bool bf16_products) {
  check_family_inputs(s, d, in);
  if (!s.delta) throw std::invalid_argument("family_chunked_lowrank: only for delta members");
  const Plan p = make_plan(s, d, out != nullptr, false, 0, true);
  run_host(p, in, state, out, nullptr, tdiag, x, y, bf16_products);
}

}  // namespace hypic::kernels::family_plan
