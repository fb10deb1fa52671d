#pragma once
// Composition of cached segments into a running inference cache (MATH.md §2, §4, §5).
#include <cstdint>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/cache.hpp"
#include "model/config.hpp"
#include "model/forward.hpp"
#include "pic/segment_entry.hpp"

namespace hypic::pic {

// Appends the cached part of a segment (its tokens after the junction window) to one layer's
// cache, right after the window has passed that layer:
//  - linear layer: state ← T_R · state + S(R|0) (addition: state ← state + S(R|0), the
//    ablation that ignores T), conv state ← the cached tail;
//  - attention layer: K moved from segment-local positions to absolute ones by one rotation
//    of segment_start positions (RoPE angles add), V appended as is.
// Runs on `be` (the model's backend).
void splice_layer(const kernels::Backend& be, const model::ModelConfig& config,
                  const SegmentEntry& entry, int layer, int64_t segment_start, bool addition,
                  model::LayerCache& cache);

// One segment placed in a prompt: its tokens (the window is their first entry.junction) and
// its entry.
struct PlacedSegment {
  const std::vector<int32_t>* tokens = nullptr;
  const SegmentEntry* entry = nullptr;
};

// The state contribution (state_contribution, MATH.md §2) of one linear layer where segment
// `segment`'s cached part is spliced in: the running state at that point is S_in.
struct StateShare {
  int segment = 0;
  int layer = 0;
  double ratio = 0;
};
struct StateShareLog {
  std::vector<StateShare> shares;
  double seconds = 0;  // spent measuring (not part of the composition's time)
};

// Appends `segments` in order to `cache` (MATH.md §5): every junction window runs under the
// true prefix, all windows layer by layer in one pass (Model::prefill_windows), and each
// segment's cached part is spliced into a layer right after its window has passed it.
// Returns the seconds spent splicing (the rest of the time is the windows' recompute). With
// `shares`, every linear layer's state contribution is logged at every splice (measured on the
// host; a device state is copied down for it), in `shares->seconds`, not in the return value.
double compose_segments(model::Model& model, const std::vector<PlacedSegment>& segments,
                        bool addition, model::InferenceCache& cache,
                        StateShareLog* shares = nullptr);

// compose_segments, then the prompt's question in the same layer-by-layer pass: the question
// is the pass's last window (nothing is spliced after it), so each layer's weights are read
// once for every window and the question instead of once more for a separate prefill. Equal
// to compose_segments followed by model.prefill(question, cache, LogitsMode::Last) up to
// float rounding (tested). Returns the question's last-token logits [1, vocab]; the seconds
// spent splicing go to splice_seconds.
Tensor compose_with_question(model::Model& model, const std::vector<PlacedSegment>& segments,
                             const std::vector<int32_t>& question, bool addition,
                             model::InferenceCache& cache, double& splice_seconds,
                             StateShareLog* shares = nullptr);

// K rows [n, Hkv, hd] rotated at positions q … moved to q + delta, in place.
void rerotate_keys(const kernels::Backend& be, const model::ModelConfig& config, Tensor& k,
                   int64_t delta);

}  // namespace hypic::pic
