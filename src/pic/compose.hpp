#pragma once
// Composition of cached segments into a running inference cache (MATH.md §2, §4, §5).
#include <cstdint>

#include "hypic/kernels/backend.hpp"
#include "model/cache.hpp"
#include "model/config.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::pic {

// Appends the cached part of a segment (its tokens after the junction window) to `cache`,
// whose junction tokens have just been prefilled (cache.n_tokens == segment_start + w):
//  - linear layers: state ← T_R · state + S(R|0) (addition: state ← state + S(R|0), the
//    ablation that ignores T), conv state ← the cached tail;
//  - attention layers: K moved from segment-local positions to absolute ones by one
//    rotation of segment_start positions (RoPE angles add), V appended as is.
// Advances cache.n_tokens by n − w. Runs on `be` (the model's backend).
void splice_entry(const kernels::Backend& be, const model::ModelConfig& config,
                  const SegmentEntry& entry, int64_t segment_start, bool addition,
                  model::InferenceCache& cache);

// K rows [n, Hkv, hd] rotated at positions q … moved to q + delta, in place.
void rerotate_keys(const kernels::Backend& be, const model::ModelConfig& config, Tensor& k,
                   int64_t delta);

}  // namespace hypic::pic
