// Host causal attention: per kv head and block of kBlock queries, the queries of every head
// sharing that kv head are stacked, their scores against all visible keys are one sgemm,
// the masked softmax runs row by row (vectorisable exp), and the weighted values are a
// second sgemm. The (kv head, query block) items are independent and run in parallel
// (parallel.hpp), each with its products on its own thread.
#include "hypic/kernels/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "hypic/kernels/blas.hpp"
#include "parallel.hpp"

namespace hypic::kernels {
namespace {
constexpr int kBlock =
    128;  // queries per head and block; the group of heads sharing a kv head multiplies it

// exp(x) for x ≤ 0 within ~1 ulp (Cephes expf polynomial after range reduction); plain
// arithmetic so the compiler vectorises the softmax loop, unlike a libm call.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);  // keeps 2^n a normal number; exp(-87) ≈ 1.6e-38
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// In place: row[0, visible) ← softmax, row[visible, width) ← 0. The reductions keep
// kLanes partial results so the compiler vectorises them without -ffast-math.
inline void masked_softmax_row(float* row, int visible, int width) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = row[0];
  int j = 0;
  for (; j + kLanes <= visible; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = row[j + l] > lane[l] ? row[j + l] : lane[l];
  float mx = row[0];
  for (int l = 0; l < kLanes; ++l) mx = std::max(mx, lane[l]);
  for (; j < visible; ++j) mx = std::max(mx, row[j]);

  for (int l = 0; l < kLanes; ++l) lane[l] = 0.0f;
  for (j = 0; j + kLanes <= visible; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_nonpositive(row[j + l] - mx);
      row[j + l] = e;
      lane[l] += e;
    }
  float sum = 0.0f;
  for (; j < visible; ++j) {
    const float e = exp_nonpositive(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  const float inv = 1.0f / sum;
  for (j = 0; j < visible; ++j) row[j] *= inv;
  for (j = visible; j < width; ++j) row[j] = 0.0f;
}
}  // namespace

float attention_exp(float x) {
  return exp_nonpositive(x);
}

namespace {
int query_block(const AttentionDims& d) {
  return std::min(d.T, kBlock);
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
  return rows * (static_cast<size_t>(d.n_kv) + 2 * static_cast<size_t>(d.hd));
}

void attention_causal(const AttentionDims& d, const float* q, const float* k, const float* v,
                      float* out, float* work) {
  if (d.T == 0) return;
  if (d.n_kv < d.T || d.Hkv <= 0 || d.H % d.Hkv != 0)
    throw std::invalid_argument("attention_causal: need n_kv >= T and H a multiple of Hkv");
  const int group = d.H / d.Hkv;
  const int past = d.n_kv - d.T;  // keys before the first query
  auto position = [&](int t) { return d.positions != nullptr ? d.positions[t] : past + t; };
  if (d.positions != nullptr)
    for (int t = 0; t < d.T; ++t)
      if (position(t) >= d.n_kv || position(t) < (t > 0 ? position(t - 1) + 1 : 0))
        throw std::invalid_argument("attention_causal: positions must ascend below n_kv");
  const int q_ld = d.H * d.hd;
  const int kv_ld = d.Hkv * d.hd;
  const int bq = query_block(d);
  const size_t hd = static_cast<size_t>(d.hd);
  // Queries per block from q0: up to bq; at given positions, also no further than keeps the
  // masked part of the block's scores (keys past a query's position, up to the block's
  // width) within a quarter of the visible part, so that far-apart windows do not multiply
  // against keys none of them sees.
  auto block_rows = [&](int q0) {
    const int most = std::min(bq, d.T - q0);
    if (d.positions == nullptr) return most;
    int64_t visible = position(q0) + 1;
    int n = 1;
    for (; n < most; ++n) {
      const int64_t width = position(q0 + n) + 1;
      const int64_t masked = width * (n + 1) - (visible + width);
      if (4 * masked > visible + width) break;
      visible += width;
    }
    return n;
  };
  // The blocks are fixed before the threads start, so every (kv head, block) item is the same
  // work at any thread count (results do not depend on it).
  std::vector<std::pair<int, int>> blocks;  // (first query, queries)
  for (int q0 = 0, nq = 0; q0 < d.T; q0 += nq) {
    nq = block_rows(q0);
    blocks.emplace_back(q0, nq);
  }
  const int n_blocks = static_cast<int>(blocks.size());
  const size_t work_floats = attention_workspace_floats(d);
  const int64_t item_work = int64_t(group) * bq * (past + d.T) * int64_t(hd) * 2;
  host::parallel_for(int64_t(d.Hkv) * n_blocks, item_work, [&](int64_t item) {
    const int g = static_cast<int>(item / n_blocks);
    const int q0 = blocks[static_cast<size_t>(item % n_blocks)].first;
    const int nq = blocks[static_cast<size_t>(item % n_blocks)].second;
    // The query heads sharing one kv head are stacked (head-major) so the scores of the whole
    // group are one product against the shared keys.
    float* scores = thread_workspace(work, work_floats);            // [group·bq, ≤ n_kv]
    float* qs = scores + static_cast<size_t>(group) * bq * d.n_kv;  // [group·bq, hd]
    float* os = qs + static_cast<size_t>(group) * bq * hd;          // [group·bq, hd]
    const float* kg = k + g * hd;
    const float* vg = v + g * hd;
    const int rows = group * nq;
    const int width = position(q0 + nq - 1) + 1;  // keys visible to the block's last query
    for (int j = 0; j < group; ++j)
      for (int t = 0; t < nq; ++t)
        std::memcpy(
            qs + (static_cast<size_t>(j) * nq + t) * hd,
            q + static_cast<size_t>(q0 + t) * q_ld + (static_cast<size_t>(g) * group + j) * hd,
            hd * sizeof(float));
    gemm(false, true, rows, width, d.hd, d.scale, qs, d.hd, kg, kv_ld, 0.0f, scores, width);
    for (int r = 0; r < rows; ++r)
      masked_softmax_row(scores + static_cast<size_t>(r) * width, position(q0 + r % nq) + 1, width);
    gemm(false, false, rows, d.hd, width, 1.0f, scores, width, vg, kv_ld, 0.0f, os, d.hd);
    for (int j = 0; j < group; ++j)
      for (int t = 0; t < nq; ++t)
        std::memcpy(
            out + static_cast<size_t>(q0 + t) * q_ld + (static_cast<size_t>(g) * group + j) * hd,
            os + (static_cast<size_t>(j) * nq + t) * hd, hd * sizeof(float));
  });
}

}  // namespace hypic::kernels
