#include "pic/segment_entry.hpp"

#include <cstring>
#include <string>

#include "common/copy_stats.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"

namespace hypic::pic {
namespace {

std::string linear_name(int layer, const char* what) {
  return "linear/" + std::to_string(layer) + "/" + what;
}
// The stored shape of T: [H] for a scalar T, [H, dk] for the diagonal part of a low-rank one
// (its factors are X and Y, [H, r, dk] each), [H, dk, dk] dense.
std::vector<int64_t> t_shape(const LinearSummary& s) {
  if (s.structure == TStructure::Scalar) return {s.heads};
  if (s.structure == TStructure::LowRank) return {s.heads, s.dk};
  return {s.heads, s.dk, s.dk};
}
std::vector<int64_t> xy_shape(const LinearSummary& s) {
  return {s.heads, s.rank, s.dk};
}

std::string attn_name(int layer, const char* what) {
  return "attn/" + std::to_string(layer) + "/" + what;
}

// Rows [first, n) of a [n, a, b] tensor.
Tensor tail_rows(const Tensor& t, int64_t first) {
  const int64_t n = t.dim(0), row = t.dim(1) * t.dim(2);
  Tensor out({n - first, t.dim(1), t.dim(2)});
  std::memcpy(out.data(), t.data() + first * row, out.bytes());
  return out;
}

Tensor take(store::Entry& stored, const std::string& name, const std::vector<int64_t>& shape) {
  auto it = stored.arrays.find(name);
  HYPIC_REQUIRE(it != stored.arrays.end(), "segment entry lacks array " + name);
  Tensor t = std::move(it->second);
  HYPIC_REQUIRE(t.shape() == shape, "segment entry array " + name + " has shape " + t.shape_str() +
                                        ", the model expects " + Tensor(shape).shape_str());
  return t;
}

}  // namespace

size_t SegmentEntry::bytes() const {
  size_t total = 0;
  for (const LinearLayerEntry& l : linear)
    total += (l.summary.t.size() + l.summary.x.size() + l.summary.y.size() + l.summary.s.size()) *
                 sizeof(float) +
             l.conv.bytes() + l.device.t.bytes() + l.device.x.bytes() + l.device.y.bytes() +
             l.device.s.bytes();
  for (const AttentionLayerEntry& a : attention) total += a.k.bytes() + a.v.bytes();
  return total;
}

TStructure entry_t_structure(model::LayerKind kind, int64_t cached_tokens, int dk) {
  if (kind == model::LayerKind::Lightning || kind == model::LayerKind::RingLinear)
    return TStructure::Scalar;
  // KDA's per-channel gates make T = diag(γ) − XᵀY exactly (docs/linear-family.md §9); the
  // kernel builds it from one chunk, which holds every segment short enough for it to pay.
  if (kind == model::LayerKind::Kda && cached_tokens > 0 && cached_tokens <= lowrank_max_tokens(dk))
    return TStructure::LowRank;
  return TStructure::Dense;
}

SegmentEntry compute_entry(model::Model& model, const std::vector<int32_t>& tokens, int w) {
  const model::ModelConfig& cfg = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  HYPIC_REQUIRE(n > 0, "a segment needs at least one token");
  HYPIC_REQUIRE(w >= 0 && w < n, "junction window of " + std::to_string(w) +
                                     " tokens does not fit a segment of " + std::to_string(n));
  const int Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
            dv = cfg.linear_value_head_dim;

  model::InferenceCache cache = model.new_cache();
  if (w > 0)
    model.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + w), cache,
                  model::LogitsMode::None);
  std::vector<Tensor> state_w(cache.layers.size());
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    model::LayerCache& lc = cache.layers[l];
    if (!model::is_linear_kind(lc.kind)) continue;
    if (w > 0) state_w[l] = lc.state;
    lc.capture_transition = true;
    lc.capture_lowrank = entry_t_structure(lc.kind, n - w, dk) == TStructure::LowRank;
    lc.transition = Tensor();
  }
  model.prefill(std::vector<int32_t>(tokens.begin() + w, tokens.end()), cache,
                model::LogitsMode::None);
  // Entries live in host memory (the store's and the memory tier's format): a model computing
  // on a device hands its cache down once here, and the rest runs on the host.
  const bool on_host = model.backend().device() == Device::Host;
  if (!on_host) {
    for (model::LayerCache& lc : cache.layers)
      for (Tensor* t :
           {&lc.state, &lc.conv, &lc.transition, &lc.transition_x, &lc.transition_y, &lc.k, &lc.v})
        if (t->rank() > 0) *t = t->to(Device::Host);
    for (Tensor& t : state_w)
      if (t.rank() > 0) t = t.to(Device::Host);
  }
  const kernels::Backend& be = on_host ? model.backend() : kernels::host_backend();

  SegmentEntry entry;
  entry.n_tokens = n;
  entry.junction = w;
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    model::LayerCache& lc = cache.layers[l];
    if (model::is_linear_kind(lc.kind)) {
      // Lightning layers (MiniMax's, Ring's: one constant decay per head) keep T as one scalar
      // per head; Ring's have no conv (an empty tensor moves). Short KDA segments keep T's
      // WY form (entry_t_structure).
      const TStructure form = entry_t_structure(lc.kind, n - w, dk);
      const bool scalar = form == TStructure::Scalar;
      LinearLayerEntry le;
      le.layer = static_cast<int>(l);
      LinearSummary& s = le.summary;
      s.structure = form;
      s.heads = Hv;
      s.dk = dk;
      s.dv = dv;
      s.tokens = n - w;
      s.rank = form == TStructure::LowRank ? static_cast<int>(n - w) : 0;
      HYPIC_REQUIRE(
          lc.transition.numel() == kernels::transition_floats_per_head(form, dk) * Hv &&
              lc.transition_x.numel() == static_cast<int64_t>(Hv) * s.rank * dk,
          "the forward pass did not capture the transition of layer " + std::to_string(l));
      s.t = lc.transition.take_vector();
      if (form == TStructure::LowRank) {
        s.x = lc.transition_x.take_vector();
        s.y = lc.transition_y.take_vector();
      }
      s.s = lc.state.take_vector();
      if (w > 0 && form == TStructure::LowRank) {
        // S(R|0) = S_n − T_R · S_w: one application of T to −S_w with S_n as its S(·|0).
        std::vector<float> out = state_w[l].take_vector();
        for (float& v : out) v = -v;
        apply(be, s, out.data());
        s.s = std::move(out);
      } else if (w > 0 && scalar) {  // S(R|0) = S_n − t_h · S_w, head by head
        const float* sw = state_w[l].data();
        const size_t per = static_cast<size_t>(dk) * dv;
        for (int h = 0; h < Hv; ++h)
          for (size_t i = 0; i < per; ++i)
            s.s[h * per + i] -= s.t[static_cast<size_t>(h)] * sw[h * per + i];
      } else if (w > 0) {  // S(R|0) = S_n − T_R · S_w, head by head
        be.gemm_strided_batched(false, false, dk, dv, dk, -1.0f, s.t.data(), dk, int64_t(dk) * dk,
                                state_w[l].data(), dv, int64_t(dk) * dv, 1.0f, s.s.data(), dv,
                                int64_t(dk) * dv, Hv);
      }
      le.conv = std::move(lc.conv);
      entry.linear.push_back(std::move(le));
    } else {
      AttentionLayerEntry ae;
      ae.layer = static_cast<int>(l);
      ae.k = tail_rows(lc.k, w);
      if (lc.kind != model::LayerKind::Mla) ae.v = tail_rows(lc.v, w);  // MLA: k only
      entry.attention.push_back(std::move(ae));
    }
  }
  return entry;
}

store::Entry to_store_entry(const SegmentEntry& entry) {
  HYPIC_REQUIRE(!entry.resident(), "a device-resident segment entry has no host arrays to store");
  store::Entry out;
  out.n_tokens = entry.n_tokens;
  for (const LinearLayerEntry& l : entry.linear) {
    const LinearSummary& s = l.summary;
    Tensor t = Tensor::from_vector(t_shape(s), s.t);
    Tensor st = Tensor::from_vector({s.heads, s.dk, s.dv}, s.s);
    out.arrays.emplace(linear_name(l.layer, "T"), std::move(t));
    out.arrays.emplace(linear_name(l.layer, "S"), std::move(st));
    if (s.structure == TStructure::LowRank) {
      out.arrays.emplace(linear_name(l.layer, "X"), Tensor::from_vector(xy_shape(s), s.x));
      out.arrays.emplace(linear_name(l.layer, "Y"), Tensor::from_vector(xy_shape(s), s.y));
    }
    if (l.conv.rank() > 0) out.arrays.emplace(linear_name(l.layer, "conv"), l.conv);
  }
  for (const AttentionLayerEntry& a : entry.attention) {
    out.arrays.emplace(attn_name(a.layer, "K"), a.k);
    if (a.v.rank() > 0) out.arrays.emplace(attn_name(a.layer, "V"), a.v);
  }
  stats::count_entry_copy(entry.bytes());
  return out;
}

store::EntryView store_view(const SegmentEntry& entry) {
  HYPIC_REQUIRE(!entry.resident(), "a device-resident segment entry has no host arrays to store");
  store::EntryView out;
  out.n_tokens = entry.n_tokens;
  for (const LinearLayerEntry& l : entry.linear) {
    const LinearSummary& s = l.summary;
    out.arrays.emplace(linear_name(l.layer, "T"), store::ArrayView{t_shape(s), s.t.data()});
    out.arrays.emplace(linear_name(l.layer, "S"),
                       store::ArrayView{{s.heads, s.dk, s.dv}, s.s.data()});
    if (s.structure == TStructure::LowRank) {
      out.arrays.emplace(linear_name(l.layer, "X"), store::ArrayView{xy_shape(s), s.x.data()});
      out.arrays.emplace(linear_name(l.layer, "Y"), store::ArrayView{xy_shape(s), s.y.data()});
    }
    if (l.conv.rank() > 0)
      out.arrays.emplace(linear_name(l.layer, "conv"),
                         store::ArrayView{l.conv.shape(), l.conv.data()});
  }
  for (const AttentionLayerEntry& a : entry.attention) {
    out.arrays.emplace(attn_name(a.layer, "K"), store::ArrayView{a.k.shape(), a.k.data()});
    if (a.v.rank() > 0)
      out.arrays.emplace(attn_name(a.layer, "V"), store::ArrayView{a.v.shape(), a.v.data()});
  }
  return out;
}

SegmentEntry from_store_entry(store::Entry&& stored, const model::ModelConfig& cfg, int w) {
  const int64_t n = stored.n_tokens;
  HYPIC_REQUIRE(n > w, "segment entry of " + std::to_string(n) +
                           " tokens cannot have a junction of " + std::to_string(w));
  const int64_t Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
                dv = cfg.linear_value_head_dim;
  SegmentEntry entry;
  entry.n_tokens = n;
  entry.junction = w;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const model::LayerKind kind = cfg.layer_types.at(static_cast<size_t>(l));
    if (model::is_linear_kind(kind)) {
      // T: one scalar per head in lightning layers (MiniMax's, Ring's)
      const bool scalar =
          kind == model::LayerKind::Lightning || kind == model::LayerKind::RingLinear;
      LinearLayerEntry le;
      le.layer = l;
      LinearSummary& s = le.summary;
      // A low-rank T (short KDA segments) comes with its factors X and Y; without them T is
      // dense, whatever the segment's length (stores written before the WY form stay valid).
      const bool lowrank = !scalar && stored.arrays.count(linear_name(l, "X")) > 0;
      s.structure = scalar ? TStructure::Scalar : lowrank ? TStructure::LowRank : TStructure::Dense;
      s.heads = static_cast<int>(Hv);
      s.dk = static_cast<int>(dk);
      s.dv = static_cast<int>(dv);
      s.tokens = n - w;
      s.rank = lowrank ? static_cast<int>(n - w) : 0;
      s.t = take(stored, linear_name(l, "T"), t_shape(s)).take_vector();
      if (lowrank) {
        s.x = take(stored, linear_name(l, "X"), xy_shape(s)).take_vector();
        s.y = take(stored, linear_name(l, "Y"), xy_shape(s)).take_vector();
      }
      s.s = take(stored, linear_name(l, "S"), {Hv, dk, dv}).take_vector();
      if (!scalar)
        le.conv = take(stored, linear_name(l, "conv"),
                       {cfg.linear_conv_kernel_dim - 1, cfg.linear_conv_dim()});
      entry.linear.push_back(std::move(le));
    } else {
      AttentionLayerEntry ae;
      ae.layer = l;
      const std::vector<int64_t> kv = {n - w, cfg.num_key_value_heads, cfg.head_dim};
      ae.k = take(stored, attn_name(l, "K"), kv);
      if (kind != model::LayerKind::Mla) ae.v = take(stored, attn_name(l, "V"), kv);
      entry.attention.push_back(std::move(ae));
    }
  }
  return entry;
}

void round_to_dtype(SegmentEntry& entry, DType dtype) {
  HYPIC_REQUIRE(!entry.resident(), "a device-resident segment entry has no host arrays to round");
  if (dtype == DType::F32) return;
  auto round = [&](float* x, size_t n) {
    store::round_in_place(dtype, x, n);
    stats::count_entry_copy(n * sizeof(float));
  };
  for (LinearLayerEntry& l : entry.linear) {
    round(l.summary.t.data(), l.summary.t.size());
    if (!l.summary.x.empty()) round(l.summary.x.data(), l.summary.x.size());
    if (!l.summary.y.empty()) round(l.summary.y.data(), l.summary.y.size());
    round(l.summary.s.data(), l.summary.s.size());
    if (l.conv.rank() > 0) round(l.conv.data(), static_cast<size_t>(l.conv.numel()));
  }
  for (AttentionLayerEntry& a : entry.attention) {
    round(a.k.data(), static_cast<size_t>(a.k.numel()));
    if (a.v.rank() > 0) round(a.v.data(), static_cast<size_t>(a.v.numel()));
  }
}

}  // namespace hypic::pic
