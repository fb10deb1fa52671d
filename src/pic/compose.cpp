#include "pic/compose.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "model/weights.hpp"
#include "pic/entry_forms.hpp"

namespace hypic::pic {
namespace {

kernels::RopeDims key_rope(const model::ModelConfig& cfg, int64_t rows) {
  return {static_cast<int>(rows), cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim(),
          static_cast<float>(cfg.rope_theta)};
}

// A summary in host memory (entries live there) as the op's view of arrays on `be`: on a
// device backend each array goes up once into `held`, which must outlive the op.
kernels::TransitionRef transition_on(const kernels::Backend& be, const LinearSummary& s,
                                     std::vector<Tensor>& held) {
  kernels::TransitionRef r;
  r.structure = s.structure;
  r.heads = s.heads;
  r.dk = s.dk;
  r.dv = s.dv;
  r.rank = s.rank;
  auto place = [&](const std::vector<float>& v) -> const float* {
    if (v.empty()) return nullptr;
    if (be.device() == Device::Host) return v.data();
    held.push_back(Tensor::from_vector({static_cast<int64_t>(v.size())}, v).to(be.device(), &be));
    return static_cast<const float*>(held.back().raw());
  };
  r.t = place(s.t);
  r.x = place(s.x);
  r.y = place(s.y);
  r.s0 = place(s.s);
  return r;
}

// A resident entry's summary (arrays already in the backend's memory) as the op's view.
kernels::TransitionRef resident_transition(const LinearLayerEntry& l) {
  const LinearSummary& s = l.summary;
  kernels::TransitionRef r;
  r.structure = s.structure;
  r.heads = s.heads;
  r.dk = s.dk;
  r.dv = s.dv;
  r.rank = s.rank;
  auto ptr = [](const Tensor& t) -> const float* {
    return t.empty() ? nullptr : static_cast<const float*>(t.raw());
  };
  r.t = ptr(l.device.t);
  r.x = ptr(l.device.x);
  r.y = ptr(l.device.y);
  r.s0 = ptr(l.device.s);
  return r;
}

// The running state of a linear layer before the splice, measured against the entry's summary.
// On a device (and for a resident entry) both come down to the host first: the measurement is
// for evaluation runs (docs/eval.md), not the serving path.
void measure_share(const kernels::Backend& be, const SegmentEntry& entry, int segment, int layer,
                   const model::LayerCache& lc, StateShareLog& log) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const LinearLayerEntry& l : entry.linear) {
    if (l.layer != layer) continue;
    double ratio = 0;
    if (be.device() == Device::Host && !entry.resident()) {
      ratio = state_contribution(be, l.summary, lc.state.data());
    } else {
      LinearSummary sum = l.summary;
      if (entry.resident()) {
        auto down = [](const Tensor& t) {
          return t.empty() ? std::vector<float>() : t.to_vector();
        };
        sum.t = down(l.device.t);
        sum.x = down(l.device.x);
        sum.y = down(l.device.y);
        sum.s = down(l.device.s);
      }
      const std::vector<float> state = lc.state.to_vector();
      ratio = state_contribution(kernels::host_backend(), sum, state.data());
    }
    log.shares.push_back({segment, layer, ratio});
    break;
  }
  log.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void rerotate_keys(const kernels::Backend& be, const model::ModelConfig& config, Tensor& k,
                   int64_t delta) {
  if (k.empty()) return;
  be.rope_shift(key_rope(config, k.dim(0)), k.data(), delta);
}

void splice_layer(const kernels::Backend& be, const model::ModelConfig& config,
                  const SegmentEntry& entry, int layer, int64_t segment_start, bool addition,
                  model::LayerCache& cache) {
  const bool host = be.device() == Device::Host;
  const bool resident = entry.resident();
  HYPIC_REQUIRE(!resident || entry.where == be.device(),
                std::string("segment entry is resident on ") + device_name(entry.where) +
                    ", the model computes on " + device_name(be.device()));
  if (model::is_linear_kind(cache.kind)) {
    for (const LinearLayerEntry& entry_layer : entry.linear) {
      if (entry_layer.layer != layer) continue;
      HYPIC_REQUIRE(cache.conv.shape() == entry_layer.conv.shape(),
                    "segment entry does not fit layer " + std::to_string(layer));
      const bool has_conv = entry_layer.conv.rank() > 0;
      const kernels::Rotary ring_rotary{config.rotary_dim(), static_cast<float>(config.rope_theta),
                                        false};
      if (resident) {  // the memory tier's device copy: nothing crosses the bus
        kernels::TransitionRef ref = resident_transition(entry_layer);
        // Ring-linear: S(R|0) moved to the segment's place into scratch on the device, so the
        // resident entry stays at offset 0 for the next query that splices it elsewhere.
        Tensor moved;
        if (cache.kind == model::LayerKind::RingLinear && ref.s0 != nullptr) {
          const LinearSummary& s = entry_layer.summary;
          moved =
              Tensor({static_cast<int64_t>(s.heads) * s.dk * s.dv}, DType::F32, be.device(), &be);
          be.rerotate_states(ring_rotary, ref.s0, model::f32(moved), s.heads, s.dk, s.dv,
                             segment_start);
          ref.s0 = model::f32(moved);
        }
        float* state = model::f32(cache.state);
        be.compose_states(&ref, &state, 1, addition);
        if (has_conv)
          be.copy_within(model::f32(cache.conv), entry_layer.conv.raw(), entry_layer.conv.bytes());
        return;
      }
      // RingLinear keys carry RoPE: S(R|0), built at segment-local positions, moves to the
      // segment's place as R_p S (docs/linear-family.md §5); T (a scalar) is unchanged.
      LinearSummary moved;
      if (cache.kind == model::LayerKind::RingLinear) {
        moved = entry_layer.summary;
        rerotate(kernels::host_backend(), moved, ring_rotary, segment_start);
      }
      const LinearSummary& sum =
          cache.kind == model::LayerKind::RingLinear ? moved : entry_layer.summary;
      if (host && !addition && !entry_layer.t_forms.empty() &&
          cache.kind != model::LayerKind::RingLinear) {
        // T in per-head forms (entry_forms.hpp): each head composes in its own form.
        const LinearSummary& s = entry_layer.summary;
        const std::string problem =
            compose_packed(entry_layer.t_forms, entry_layer.t_packed, s.heads, s.dk, s.dv,
                           s.s.data(), cache.state.data());
        HYPIC_REQUIRE(problem.empty(),
                      "segment entry layer " + std::to_string(layer) + ": " + problem);
        if (has_conv)
          be.copy_within(cache.conv.data(), entry_layer.conv.data(), entry_layer.conv.bytes());
        return;
      }
      if (host) {
        apply_layers(be, {&sum}, {cache.state.data()}, addition);
        if (has_conv)
          be.copy_within(cache.conv.data(), entry_layer.conv.data(), entry_layer.conv.bytes());
        return;
      }
      std::vector<Tensor> held;  // the uploaded summary arrays, alive until the op has run
      const kernels::TransitionRef ref = transition_on(be, sum, held);
      float* state = model::f32(cache.state);
      be.compose_states(&ref, &state, 1, addition);
      if (has_conv)
        be.copy_from_host(model::f32(cache.conv), entry_layer.conv.data(),
                          entry_layer.conv.bytes());
      return;  // `held` is freed in stream order, after the op (Backend::deallocate)
    }
  } else {
    for (const AttentionLayerEntry& a : entry.attention) {
      if (a.layer != layer) continue;
      const int64_t rows = entry.cached_tokens();
      const int64_t first = cache.kv_tokens();
      HYPIC_REQUIRE(first == segment_start + entry.junction,
                    "splice: layer " + std::to_string(layer) + " holds " + std::to_string(first) +
                        " tokens, expected the segment start plus its junction window (" +
                        std::to_string(segment_start + entry.junction) + ")");
      const int64_t row_floats = cache.k.dim(1) * cache.k.dim(2);
      if (cache.kind == model::LayerKind::Mla) {  // latent rows, no RoPE: nothing to rotate
        if (resident) {
          cache.append_kv(model::f32(a.k), nullptr, rows, &be);
          return;
        }
        if (host) {
          cache.append_kv(a.k.data(), nullptr, rows);
          return;
        }
        const Tensor k = a.k.to(be.device(), &be);
        cache.append_kv(model::f32(k), nullptr, rows, &be);
        return;  // the uploaded rows are freed in stream order, after the append's copy
      }
      if (resident) {
        cache.append_kv(model::f32(a.k), model::f32(a.v), rows, &be);
        be.rope_shift(key_rope(config, rows), model::f32(cache.k) + first * row_floats,
                      segment_start);
        return;
      }
      if (host) {
        cache.append_kv(a.k.data(), a.v.data(), rows);
        be.rope_shift(key_rope(config, rows), cache.k.data() + first * row_floats, segment_start);
        return;
      }
      const Tensor k = a.k.to(be.device(), &be), v = a.v.to(be.device(), &be);
      cache.append_kv(model::f32(k), model::f32(v), rows, &be);
      be.rope_shift(key_rope(config, rows), model::f32(cache.k) + first * row_floats,
                    segment_start);
      return;  // the uploaded K/V are freed in stream order, after the append's copies
    }
  }
  throw Error("segment entry has no part for layer " + std::to_string(layer));
}

namespace {
// The one pass behind compose_segments and compose_with_question: every segment's window,
// then the question's tokens (when given) as a last window with nothing spliced after it.
Tensor compose_pass(model::Model& model, const std::vector<PlacedSegment>& segments,
                    const std::vector<int32_t>* question, bool addition,
                    model::InferenceCache& cache, StateShareLog* shares, double& splice_seconds) {
  std::vector<model::Window> windows;
  std::vector<int64_t> starts;  // each segment's absolute position
  int64_t pos = cache.n_tokens;
  for (const PlacedSegment& s : segments) {
    const SegmentEntry& e = *s.entry;
    HYPIC_REQUIRE(static_cast<int64_t>(s.tokens->size()) == e.n_tokens && e.junction >= 0 &&
                      e.junction < e.n_tokens,
                  "segment of " + std::to_string(s.tokens->size()) +
                      " tokens does not match its entry (" + std::to_string(e.n_tokens) +
                      " tokens, window " + std::to_string(e.junction) + ")");
    windows.push_back({s.tokens->data(), e.junction, e.cached_tokens()});
    starts.push_back(pos);
    pos += e.n_tokens;
  }
  if (question != nullptr) {
    HYPIC_REQUIRE(!question->empty(), "compose: the question has no tokens");
    windows.push_back({question->data(), static_cast<int>(question->size()), 0});
  }
  const kernels::Backend& be = model.backend();
  const model::ModelConfig& cfg = model.config();
  // Resident entries may still be on their way up (EntryUploader): the splices read them.
  uint64_t ticket = 0;
  for (const PlacedSegment& s : segments) ticket = std::max(ticket, s.entry->upload_ticket);
  be.upload_fence(ticket);
  splice_seconds = 0;
  const model::SpliceFn splice = [&](int i, int layer, model::LayerCache& lc) {
    const size_t k = static_cast<size_t>(i);
    if (k >= segments.size()) return;  // the question: nothing follows it
    if (shares != nullptr && lc.kind == model::LayerKind::Linear)
      measure_share(be, *segments[k].entry, i, layer, lc, *shares);
    const auto t0 = std::chrono::steady_clock::now();
    splice_layer(be, cfg, *segments[k].entry, layer, starts[k], addition, lc);
    splice_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  return model.prefill_windows(
      windows, cache, splice,
      question != nullptr ? model::LogitsMode::Last : model::LogitsMode::None);
}
}  // namespace

double compose_segments(model::Model& model, const std::vector<PlacedSegment>& segments,
                        bool addition, model::InferenceCache& cache, StateShareLog* shares) {
  double splice_seconds = 0;
  compose_pass(model, segments, nullptr, addition, cache, shares, splice_seconds);
  return splice_seconds;
}

Tensor compose_with_question(model::Model& model, const std::vector<PlacedSegment>& segments,
                             const std::vector<int32_t>& question, bool addition,
                             model::InferenceCache& cache, double& splice_seconds,
                             StateShareLog* shares) {
  return compose_pass(model, segments, &question, addition, cache, shares, splice_seconds);
}

}  // namespace hypic::pic
