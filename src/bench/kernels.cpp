#include "bench/kernels.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <random>
#include <utility>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/threads.hpp"
#include "model/arch/arch.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"

namespace hypic::bench {
namespace {
using kernels::Op;
constexpr size_t kOps = static_cast<size_t>(Op::kCount);

// Forwards every op to another backend and adds up the seconds and calls of each.
class TimingBackend final : public kernels::Backend {
 public:
  explicit TimingBackend(const kernels::Backend& inner) : in_(inner) {}
  void clear() const {
    seconds_.fill(0.0);
    calls_.fill(0);
  }
  double seconds(Op op) const { return seconds_[static_cast<size_t>(op)]; }
  int64_t calls(Op op) const { return calls_[static_cast<size_t>(op)]; }

  const char* name() const override { return in_.name(); }
  Device device() const override { return in_.device(); }
  bool supports(Op op) const override { return in_.supports(op); }
  void synchronize() const override { in_.synchronize(); }
  void* allocate(size_t bytes) const override { return in_.allocate(bytes); }
  void deallocate(void* p) const noexcept override { in_.deallocate(p); }
  void copy_to_host(void* d, const void* s, size_t n) const override { in_.copy_to_host(d, s, n); }
  void copy_from_host(void* d, const void* s, size_t n) const override {
    in_.copy_from_host(d, s, n);
  }
  void copy_within(void* d, const void* s, size_t n) const override { in_.copy_within(d, s, n); }

  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) const override {
    timed(Op::Gemm, [&] { in_.gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }
  void gemm_strided_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                            int lda, int64_t sa, const float* b, int ldb, int64_t sb, float beta,
                            float* c, int ldc, int64_t sc, int batch) const override {
    timed(Op::GemmStridedBatched, [&] {
      in_.gemm_strided_batched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                               batch);
    });
  }
  void linear(const float* x, const float* w, float* y, int m, int n, int k,
              bool acc) const override {
    timed(Op::Linear, [&] { in_.linear(x, w, y, m, n, k, acc); });
  }
  void linear_bf16(const float* x, const uint16_t* w, float* y, int m, int n, int k,
                   bool acc) const override {
    timed(Op::LinearBf16, [&] { in_.linear_bf16(x, w, y, m, n, k, acc); });
  }
  void copy_strided(const float* src, int ld, int off, float* dst, int rows,
                    int cols) const override {
    timed(Op::CopyStrided, [&] { in_.copy_strided(src, ld, off, dst, rows, cols); });
  }
  void gather_rows(const float* t, int cols, const int32_t* ids, int n, float* out) const override {
    timed(Op::GatherRows, [&] { in_.gather_rows(t, cols, ids, n, out); });
  }
  void gather_rows_bf16(const uint16_t* t, int cols, const int32_t* ids, int n,
                        float* out) const override {
    timed(Op::GatherRowsBf16, [&] { in_.gather_rows_bf16(t, cols, ids, n, out); });
  }
  void family_chunked(const kernels::FamilySpec& s, const kernels::FamilyDims& d,
                      const kernels::FamilyInputs& in, float* state, float* out, float* tr,
                      int chunk) const override {
    timed(Op::FamilyChunked, [&] { in_.family_chunked(s, d, in, state, out, tr, chunk); });
  }
  void family_chunked_lowrank(const kernels::FamilySpec& s, const kernels::FamilyDims& d,
                              const kernels::FamilyInputs& in, float* state, float* out,
                              float* tdiag, float* x, float* y) const override {
    timed(Op::FamilyChunkedLowRank,
          [&] { in_.family_chunked_lowrank(s, d, in, state, out, tdiag, x, y); });
  }
  void family_recurrent_f32(const kernels::FamilySpec& s, const kernels::FamilyDims& d,
                            const kernels::FamilyInputs& in, float* state,
                            float* out) const override {
    timed(Op::FamilyRecurrentF32, [&] { in_.family_recurrent_f32(s, d, in, state, out); });
  }
  void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                          int K) const override {
    timed(Op::CausalConv1dSilu, [&] { in_.causal_conv1d_silu(x, w, state, y, T, C, K); });
  }
  void causal_conv1d_tail(const float* x, float* state, int T, int C, int K) const override {
    timed(Op::CausalConv1dTail, [&] { in_.causal_conv1d_tail(x, state, T, C, K); });
  }
  void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols,
                             float eps) const override {
    timed(Op::RmsNormZeroCentred, [&] { in_.rms_norm_zero_centred(x, w, y, rows, cols, eps); });
  }
  void rms_norm(const float* x, const float* w, float* y, int rows, int cols,
                float eps) const override {
    timed(Op::RmsNorm, [&] { in_.rms_norm(x, w, y, rows, cols, eps); });
  }
  void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                      float eps) const override {
    timed(Op::GatedRmsNorm, [&] { in_.gated_rms_norm(x, z, w, y, rows, cols, eps); });
  }
  void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale) const override {
    timed(Op::L2NormalizeRows, [&] { in_.l2_normalize_rows(x, rows, cols, eps, scale); });
  }
  void rope_apply(const kernels::RopeDims& d, float* x, int64_t pos0) const override {
    timed(Op::RopeApply, [&] { in_.rope_apply(d, x, pos0); });
  }
  void rope_shift(const kernels::RopeDims& d, float* x, int64_t delta) const override {
    timed(Op::RopeShift, [&] { in_.rope_shift(d, x, delta); });
  }
  void rotary_rotate_rows(const kernels::Rotary& r, float* x, int n, int ld, int dk,
                          int64_t pos) const override {
    timed(Op::RotaryRotateRows, [&] { in_.rotary_rotate_rows(r, x, n, ld, dk, pos); });
  }
  void rotary_rotate_columns(const kernels::Rotary& r, float* m, int dk, int cols,
                             int64_t pos) const override {
    timed(Op::RotaryRotateColumns, [&] { in_.rotary_rotate_columns(r, m, dk, cols, pos); });
  }
  void rerotate_states(const kernels::Rotary& r, const float* src, float* dst, int heads, int dk,
                       int dv, int64_t pos) const override {
    timed(Op::RerotateStates, [&] { in_.rerotate_states(r, src, dst, heads, dk, dv, pos); });
  }
  size_t attention_workspace_floats(const kernels::AttentionDims& d) const override {
    return in_.attention_workspace_floats(d);
  }
  void attention_causal(const kernels::AttentionDims& d, const float* q, const float* k,
                        const float* v, float* out, float* work) const override {
    timed(Op::AttentionCausal, [&] { in_.attention_causal(d, q, k, v, out, work); });
  }
  void sigmoid_gate(float* x, const float* gate, int rows, int cols, int ld) const override {
    timed(Op::SigmoidGate, [&] { in_.sigmoid_gate(x, gate, rows, cols, ld); });
  }
  void swiglu(const float* gu, float* out, int rows, int width) const override {
    timed(Op::Swiglu, [&] { in_.swiglu(gu, out, rows, width); });
  }
  void axpby(const float* x, float* y, int64_t n, float a, float b) const override {
    timed(Op::Axpby, [&] { in_.axpby(x, y, n, a, b); });
  }
  void round_to_dtype(float* x, int64_t n, DType dtype) const override {
    timed(Op::RoundToDtype, [&] { in_.round_to_dtype(x, n, dtype); });
  }
  void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows,
                          int cols) const override {
    timed(Op::AddSigmoidScaled, [&] { in_.add_sigmoid_scaled(x, y, logit, rows, cols); });
  }
  void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
                 float* beta, float* g, int rows, int heads) const override {
    timed(Op::GdnGates, [&] { in_.gdn_gates(b, a, ld, A_log, dt_bias, beta, g, rows, heads); });
  }
  void moe_route(const kernels::MoeRouteSpec& s, const float* logits, const float* bias, int T,
                 int* experts, float* weights) const override {
    timed(Op::MoeRoute, [&] { in_.moe_route(s, logits, bias, T, experts, weights); });
  }
  void moe_group(const int* experts, int T, int k, int E, int* start, int* ids,
                 int* work) const override {
    timed(Op::MoeGroup, [&] { in_.moe_group(experts, T, k, E, start, ids, work); });
  }
  void moe_gather(const float* x, int hidden, const int* ids, int n, int k,
                  float* xe) const override {
    timed(Op::MoeGather, [&] { in_.moe_gather(x, hidden, ids, n, k, xe); });
  }
  void moe_scatter_add(const float* ye, int hidden, const int* ids, int n, int k,
                       const float* weights, float* out) const override {
    timed(Op::MoeScatterAdd, [&] { in_.moe_scatter_add(ye, hidden, ids, n, k, weights, out); });
  }
  void moe_combine(const float* ye, int hidden, const int* ids, int T, int k, const float* weights,
                   float* out, int* work) const override {
    timed(Op::MoeCombine, [&] { in_.moe_combine(ye, hidden, ids, T, k, weights, out, work); });
  }
  void grouped_linear(const float* x, const Tensor* const* w, const int* start, int groups,
                      float* y, int n, int k) const override {
    timed(Op::GroupedLinear, [&] { in_.grouped_linear(x, w, start, groups, y, n, k); });
  }
  bool tensor_core_products() const override { return in_.tensor_core_products(); }
  void compose_states(const kernels::TransitionRef* sums, float* const* states, int n,
                      bool addition) const override {
    timed(Op::ComposeStates, [&] { in_.compose_states(sums, states, n, addition); });
  }

 private:
  template <class F>
  void timed(Op op, F&& f) const {
    const auto t0 = Clock::now();
    f();
    in_.synchronize();
    seconds_[static_cast<size_t>(op)] += seconds_since(t0);
    ++calls_[static_cast<size_t>(op)];
  }

  const kernels::Backend& in_;
  mutable std::array<double, kOps> seconds_{};
  mutable std::array<int64_t, kOps> calls_{};
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

double amdahl_parallel_fraction(double t1, double tp, int p) {
  if (p <= 1 || t1 <= 0 || tp <= 0) return 0.0;
  const double f = (1.0 - tp / t1) / (1.0 - 1.0 / p);
  return std::min(1.0, std::max(0.0, f));
}

KernelsResult run_kernels(const KernelsOptions& o) {
  HYPIC_REQUIRE(o.tokens > 0 && o.reps > 0, "--tokens and --reps must be positive");
  HYPIC_REQUIRE(!o.threads.empty(), "--threads needs at least one thread count");
  for (size_t i = 0; i < o.threads.size(); ++i)
    HYPIC_REQUIRE(o.threads[i] > 0 && (i == 0 || o.threads[i] > o.threads[i - 1]),
                  "--threads must be positive counts in ascending order, e.g. 1,2");
  KernelsResult r;
  r.config = model::preset_config(model::parse_arch(o.arch), o.preset);
  r.threading = kernels::threading_description();
  r.threads = o.threads;
  const TimingBackend timing(kernels::host_backend());
  model::Model net(r.config, model::random_weights(r.config, o.seed), timing);
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int32_t> tok(0, r.config.vocab_size - 1);
  std::vector<int32_t> ids(static_cast<size_t>(o.tokens));
  for (auto& t : ids) t = tok(rng);

  const int threads_before = kernels::threads();
  // seconds[op][count][rep]; the last slot of the op axis is the prefill's total.
  std::vector<std::vector<std::vector<double>>> seconds(
      kOps + 1, std::vector<std::vector<double>>(o.threads.size()));
  std::array<int64_t, kOps> calls{};
  for (size_t c = 0; c < o.threads.size(); ++c) {
    kernels::set_threads(o.threads[c]);
    double cpu = 0.0, wall = 0.0;
    for (int run = 0; run <= o.reps; ++run) {  // run 0 warms up
      auto cache = net.new_cache();
      timing.clear();
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      net.prefill(ids, cache, model::LogitsMode::Last);
      const double total = seconds_since(t0);
      if (run == 0) continue;
      cpu += process_cpu_seconds() - cpu0;
      wall += total;
      seconds[kOps][c].push_back(total);
      for (size_t i = 0; i < kOps; ++i) {
        seconds[i][c].push_back(timing.seconds(static_cast<Op>(i)));
        calls[i] = timing.calls(static_cast<Op>(i));
      }
    }
    r.cores_used.push_back(cpu / std::max(1e-12, wall));
  }
  kernels::set_threads(threads_before);
  r.blas = kernels::blas_info();

  const int p = o.threads.back();
  const bool from_one = o.threads.front() == 1 && o.threads.size() > 1;
  auto fill = [&](KernelRow& row, size_t i) {
    for (size_t c = 0; c < o.threads.size(); ++c) row.seconds.push_back(median(seconds[i][c]));
    if (from_one)
      row.parallel_fraction = amdahl_parallel_fraction(row.seconds.front(), row.seconds.back(), p);
  };
  for (size_t c = 0; c < o.threads.size(); ++c)
    r.prefill_seconds.push_back(median(seconds[kOps][c]));
  for (size_t i = 0; i < kOps; ++i) {
    if (calls[i] == 0) continue;
    KernelRow row;
    row.op = kernels::op_name(static_cast<Op>(i));
    row.calls = calls[i];
    fill(row, i);
    row.share = row.seconds.front() / std::max(1e-12, r.prefill_seconds.front());
    r.rows.push_back(std::move(row));
  }
  std::sort(r.rows.begin(), r.rows.end(),
            [](const KernelRow& a, const KernelRow& b) { return a.share > b.share; });
  // What no op covers: the prefill's median minus the ops' medians, per count.
  r.other.op = "other (outside ops)";
  for (size_t c = 0; c < o.threads.size(); ++c) {
    double ops = 0.0;
    for (const KernelRow& row : r.rows) ops += row.seconds[c];
    r.other.seconds.push_back(std::max(0.0, r.prefill_seconds[c] - ops));
  }
  r.other.share = r.other.seconds.front() / std::max(1e-12, r.prefill_seconds.front());
  if (from_one)
    r.other.parallel_fraction =
        amdahl_parallel_fraction(r.other.seconds.front(), r.other.seconds.back(), p);

  if (from_one) {
    r.projection_assumption =
        "Amdahl per op: the fraction f of its 1-thread time that sped up from 1 to " +
        std::to_string(p) +
        " threads here scales perfectly to N cores, the rest stays serial; memory bandwidth, "
        "NUMA, and the fixed number of GEMM tiles and heads per op are not modelled, so this "
        "is an upper bound";
    for (int n : o.project_to) {
      double t = 0.0;
      auto add = [&](const KernelRow& row) {
        t += row.seconds.front() * ((1.0 - row.parallel_fraction) + row.parallel_fraction / n);
      };
      for (const KernelRow& row : r.rows) add(row);
      add(r.other);
      r.projection.push_back({n, t, r.prefill_seconds.front() / std::max(1e-12, t)});
    }
  }
  return r;
}

}  // namespace hypic::bench
