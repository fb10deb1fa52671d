// Host causal attention, the steps of attention_plan.hpp (shared with the CUDA backend): per kv
// head and block of queries, the queries of every head sharing that kv head are stacked, and
// the keys are visited in steps of kKeys. Each step's scores are
// one sgemm for the queries that see the step's first key (positions ascend, so they are a
// run of rows), the masked exponentials run row by row (vectorisable exp) with a running max
// and sum per row (online softmax), and the weighted values accumulate through a second sgemm.
// A query meets only the key steps it can see: junction windows far apart in one block do not
// multiply against keys none of them sees. The (kv head, query block) items are independent
// and run in parallel (parallel.hpp), each with its products on its own thread.
#include "hypic/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "fast_exp.hpp"
#include "hypic/kernels/attention_checks.hpp"
#include "hypic/kernels/attention_plan.hpp"
#include "hypic/kernels/blas.hpp"
#include "parallel.hpp"

namespace hypic::kernels {
namespace {
// The largest of row[0, visible), in kLanes partial results so that the compiler vectorises
// the loop without -ffast-math.
constexpr int kLanes = 16;
inline float row_max(const float* row, int visible) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = row[0];
  int j = 0;
  for (; j + kLanes <= visible; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = row[j + l] > lane[l] ? row[j + l] : lane[l];
  float mx = row[0];
  for (int l = 0; l < kLanes; ++l) mx = std::max(mx, lane[l]);
  for (; j < visible; ++j) mx = std::max(mx, row[j]);
  return mx;
}

// In place: row[0, visible) ← exp(row − mx), row[visible, width) ← 0 (keys past the query).
// Returns the sum of the exponentials.
inline float exp_row(float* row, int visible, int width, float mx) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = 0.0f;
  int j = 0;
  for (; j + kLanes <= visible; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = host::exp_nonpositive(row[j + l] - mx);
      row[j + l] = e;
      lane[l] += e;
    }
  float sum = 0.0f;
  for (; j < visible; ++j) {
    const float e = host::exp_nonpositive(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  for (j = visible; j < width; ++j) row[j] = 0.0f;
  return sum;
}
}  // namespace

float attention_exp(float x) {
  return host::exp_nonpositive(x);
}

namespace {
// Query rows per item (the queries of a block times the heads sharing their kv head) and keys
// per step of the key loop: the scores of one step, kRows × kKeys floats, stay in L2.
constexpr int kRows = 256, kKeys = 256;

int query_block(const AttentionDims& d) {
  return attention_plan::query_block(d, kRows);
}

// The caller's workspace serves the thread in slot 0; every other thread of the team keeps its
// own, grown once and reused by later calls.
float* thread_workspace(float* work, size_t floats) {
  if (host::thread_slot() == 0) return work;
  thread_local std::vector<float> own;
  if (own.size() < floats) own.resize(floats);
  return own.data();
}
}  // namespace

size_t attention_workspace_floats(const AttentionDims& d) {
  const size_t rows = static_cast<size_t>(d.H / std::max(1, d.Hkv)) * query_block(d);
  // queries, accumulated values, scores of one key step, running max and sum per row
  return rows * (2 * static_cast<size_t>(d.hd) + kKeys + 2);
}

void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out, float* work) {
  if (d.T == 0) return;
  if (d.n_kv < d.T || d.Hkv <= 0 || d.H % d.Hkv != 0)
    throw std::invalid_argument("attention_causal: need n_kv >= T and H a multiple of Hkv");
  const int group = d.H / d.Hkv;
  const int past = d.n_kv - d.T;  // keys before the first query
  if (d.positions != nullptr) check_query_positions(d.positions, d.T, d.n_kv);
  const int q_ld = d.H * d.hd;
  const int kv_ld = d.Hkv * d.hd;
  const int bq = query_block(d);
  const int n_blocks = (d.T + bq - 1) / bq;
  const size_t hd = static_cast<size_t>(d.hd);
  const size_t work_floats = attention_workspace_floats(d);
  // Items are (kv head, block of bq queries), fixed by the shape: every item is the same work
  // at any thread count, so results do not depend on it.
  const int64_t item_work = int64_t(group) * bq * (past + d.T) * int64_t(hd) * 2;
  // Blocks wholly before first_query are skipped; the others are the same items as ever.
  const int skipped = std::min(n_blocks, std::max(0, d.first_query) / bq);
  const int kept = n_blocks - skipped;
  host::parallel_for(int64_t(d.Hkv) * kept, item_work, [&](int64_t item) {
    const int g = static_cast<int>(item / kept);
    const int q0 = static_cast<int>(skipped + item % kept) * bq;
    const int nq = std::min(bq, d.T - q0);
    const size_t rows = static_cast<size_t>(group) * nq;
    // Rows are query-major (row t·group + j: query q0 + t, head g·group + j), so the queries
    // that see a key (those at or after its position) are a contiguous run of rows.
    float* qs = thread_workspace(work, work_floats);  // [rows, hd]
    float* acc = qs + rows * hd;                      // [rows, hd]
    float* scores = acc + rows * hd;                  // [rows, kKeys]
    float* mx = scores + rows * kKeys;                // [rows]
    float* sum = mx + rows;                           // [rows]
    for (int t = 0; t < nq; ++t)
      std::memcpy(qs + static_cast<size_t>(t) * group * hd,
                  q + static_cast<size_t>(q0 + t) * q_ld + static_cast<size_t>(g) * group * hd,
                  group * hd * sizeof(float));
    std::fill(acc, acc + rows * hd, 0.0f);
    std::fill(mx, mx + rows, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + rows, 0.0f);
    const float* kg = k + g * hd;
    const float* vg = v + g * hd;
    // Keys in steps of kKeys from 0 up to what the block's last query sees; each step meets
    // only the queries that see its first key, with an online softmax (running max and sum,
    // the accumulated values rescaled when the max grows).
    attention_plan::for_each_key_step(
        d.positions, past, q0, nq, kKeys, [&](int first, int j0, int width) {
          const size_t r0 = static_cast<size_t>(first) * group;
          const int active = static_cast<int>(rows - r0);
          float* s = scores + r0 * kKeys;
          gemm(false, true, active, width, d.hd, d.scale, qs + r0 * hd, d.hd,
               kg + static_cast<size_t>(j0) * kv_ld, kv_ld, 0.0f, s, kKeys);
          for (int r = 0; r < active; ++r) {
            const size_t row = r0 + r;
            const int t = static_cast<int>(row) / group;
            const int visible = attention_plan::visible_keys(
                attention_plan::position(d.positions, past, q0 + t), j0, width);  // ≥ 1
            float* sr = s + static_cast<size_t>(r) * kKeys;
            const float m_old = mx[row];
            const float m_new = std::max(m_old, row_max(sr, visible));
            const float rescale = m_old == -std::numeric_limits<float>::infinity()
                                      ? 0.0f  // the row's first step
                                      : host::exp_nonpositive(m_old - m_new);
            sum[row] = sum[row] * rescale + exp_row(sr, visible, width, m_new);
            mx[row] = m_new;
            if (rescale != 1.0f)
              for (size_t c = 0; c < hd; ++c) acc[row * hd + c] *= rescale;
          }
          gemm(false, false, active, d.hd, width, 1.0f, s, kKeys,
               vg + static_cast<size_t>(j0) * kv_ld, kv_ld, 1.0f, acc + r0 * hd, d.hd);
        });
    for (int t = 0; t < nq; ++t)
      for (int j = 0; j < group; ++j) {
        const size_t row = static_cast<size_t>(t) * group + j;
        const float inv = 1.0f / sum[row];
        float* o =
            out + static_cast<size_t>(q0 + t) * q_ld + (static_cast<size_t>(g) * group + j) * hd;
        for (size_t c = 0; c < hd; ++c) o[c] = acc[row * hd + c] * inv;
      }
  });
}

}  // namespace hypic::kernels
