// Comparisons shared by the golden tests against transformers (forward_test.cpp for the
// random golden models, trained_model_test.cpp for the embedded trained model).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/forward.hpp"

namespace hypic::test {

inline float max_abs_diff(const float* a, const float* b, size_t n) {
  float worst = 0.0f;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// The largest |logit difference| between `rows` [k, V] (transformers: row 0 = last prompt
// position, row i = single-token cached decode after greedy[i-1]) and the same rows from
// hypic's prefill and cached decode_step.
inline float decode_rows_diff(model::Model& model, const std::vector<int32_t>& ids,
                              const std::vector<int32_t>& greedy, const Tensor& rows) {
  model::InferenceCache cache = model.new_cache();
  Tensor row = model.prefill(ids, cache, model::LogitsMode::Last);
  const int64_t V = rows.dim(1);
  float worst = max_abs_diff(row.data(), rows.data(), static_cast<size_t>(V));
  for (int64_t i = 1; i < rows.dim(0); ++i) {
    row = model.decode_step(greedy[static_cast<size_t>(i - 1)], cache);
    worst = std::max(worst, max_abs_diff(row.data(), rows.data() + i * V, static_cast<size_t>(V)));
  }
  return worst;
}

}  // namespace hypic::test
