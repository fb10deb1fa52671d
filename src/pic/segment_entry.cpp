#include "pic/segment_entry.hpp"

#include <cstring>
#include <string>
#include <tuple>

#include "common/copy_stats.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/kernels/blas.hpp"
#include "model/weights.hpp"

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

// A layer's T in per-head forms as its two store arrays (copies: the entry keeps its own).
void add_packed_t(const LinearLayerEntry& l, store::Entry& out) {
  const int64_t H = l.summary.heads;
  out.arrays.emplace(linear_name(l.layer, "Tform"), Tensor::from_vector({H, 2}, l.t_forms));
  if (!l.t_packed.empty())
    out.arrays.emplace(linear_name(l.layer, "Tpack"),
                       Tensor::from_vector({static_cast<int64_t>(l.t_packed.size())}, l.t_packed));
}
// The same for S(C|0) with heads in fp8.
void add_packed_s(const LinearLayerEntry& l, store::Entry& out) {
  const int64_t H = l.summary.heads;
  out.arrays.emplace(linear_name(l.layer, "Sform"), Tensor::from_vector({H, 4}, l.s_forms));
  out.arrays.emplace(linear_name(l.layer, "Spack"),
                     Tensor::from_vector({static_cast<int64_t>(l.s_packed.size())}, l.s_packed));
}

}  // namespace

size_t SegmentEntry::bytes() const {
  size_t total = 0;
  for (const LinearLayerEntry& l : linear)
    total += (l.summary.t.size() + l.summary.x.size() + l.summary.y.size() + l.summary.s.size()) *
                 sizeof(float) +
             (l.t_forms.size() + l.t_packed.size() + l.s_forms.size() + l.s_packed.size()) *
                 sizeof(float) +
             l.conv.bytes() + l.device.t.bytes() + l.device.x.bytes() + l.device.y.bytes() +
             l.device.s.bytes();
  for (const AttentionLayerEntry& a : attention) total += a.k.bytes() + a.v.bytes();
  return total;
}

void choose_entry_forms(SegmentEntry& entry, double tolerance, DType store_dtype,
                        FormTally* tally) {
  HYPIC_REQUIRE(!entry.resident(), "per-head forms of T are chosen for host entries");
  const bool fp8 = fp8_fits_store(store_dtype);
  for (LinearLayerEntry& l : entry.linear) {
    LinearSummary& s = l.summary;
    if (s.structure != TStructure::Dense || !l.t_forms.empty() || !l.s_forms.empty()) continue;
    PackedT p = pack_t(s, tolerance, fp8);
    if (tally != nullptr) pic::tally(p, s.dk, *tally, s.dv);
    if (!p.s_forms.empty()) {
      const std::string problem = unpack_s(p.s_forms, p.s_packed, s);
      HYPIC_REQUIRE(problem.empty(), "choose_entry_forms: " + problem);
      l.s_forms = std::move(p.s_forms);
      l.s_packed = std::move(p.s_packed);
    }
    if (p.all_dense()) continue;
    const std::string problem = unpack_t(p.forms, p.packed, s);
    HYPIC_REQUIRE(problem.empty(), "choose_entry_forms: " + problem);
    l.t_forms = std::move(p.forms);
    l.t_packed = std::move(p.packed);
  }
}

std::string fp8_store_problem(const store::Entry& entry, DType dtype) {
  if (fp8_fits_store(dtype)) return "";
  for (const auto& [name, t] : entry.arrays) {
    const bool tform = name.size() > 6 && name.compare(name.size() - 6, 6, "/Tform") == 0;
    const bool sform = name.size() > 6 && name.compare(name.size() - 6, 6, "/Sform") == 0;
    if (!tform && !sform) continue;
    const int64_t width = tform ? 2 : 4;
    const float fp8_code = tform ? static_cast<float>(HeadForm::Fp8) : 1.0f;
    for (int64_t i = 0; i < t.numel(); i += width)
      if (t.data()[i] == fp8_code)
        return "segment entry array " + name + " holds fp8 forms, which a " + dtype_name(dtype) +
               " store cannot keep";
  }
  return "";
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

namespace {

// The segment's prefill for its entry, on the model's backend: the window c_0 … c_{w−1}, each
// linear layer's state S_w kept (in `state_w`), then the rest capturing T_R, in its WY form
// where entry_t_structure picks it and `lowrank` allows it (host entries; resident entries on a
// device keep T dense).
model::InferenceCache prefill_segment(model::Model& model, const std::vector<int32_t>& tokens,
                                      int w, std::vector<Tensor>& state_w, bool lowrank) {
  const int dk = model.config().linear_key_head_dim;
  const int64_t n = static_cast<int64_t>(tokens.size());
  HYPIC_REQUIRE(n > 0, "a segment needs at least one token");
  HYPIC_REQUIRE(w >= 0 && w < n, "junction window of " + std::to_string(w) +
                                     " tokens does not fit a segment of " + std::to_string(n));
  model::InferenceCache cache = model.new_cache();
  if (w > 0)
    model.prefill(std::vector<int32_t>(tokens.begin(), tokens.begin() + w), cache,
                  model::LogitsMode::None);
  state_w.assign(cache.layers.size(), Tensor());
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    model::LayerCache& lc = cache.layers[l];
    if (!model::is_linear_kind(lc.kind)) continue;
    if (w > 0) state_w[l] = lc.state;
    lc.capture_transition = true;
    lc.capture_lowrank = lowrank && entry_t_structure(lc.kind, n - w, dk) == TStructure::LowRank;
    lc.transition = Tensor();
  }
  model.prefill(std::vector<int32_t>(tokens.begin() + w, tokens.end()), cache,
                model::LogitsMode::None);
  return cache;
}

bool scalar_kind(model::LayerKind kind) {  // lightning layers: T is one scalar per head
  return kind == model::LayerKind::Lightning || kind == model::LayerKind::RingLinear;
}

}  // namespace

SegmentEntry compute_entry(model::Model& model, const std::vector<int32_t>& tokens, int w) {
  const model::ModelConfig& cfg = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
            dv = cfg.linear_value_head_dim;
  std::vector<Tensor> state_w;
  model::InferenceCache cache = prefill_segment(model, tokens, w, state_w, true);
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
      } else if (w > 0 && scalar) {  // S(R|0) = S_n − t_h · S_w, head by head (the device's op)
        const float* sw = state_w[l].data();
        const int64_t per = static_cast<int64_t>(dk) * dv;
        for (int h = 0; h < Hv; ++h)
          be.axpby(sw + h * per, s.s.data() + h * per, per, -s.t[static_cast<size_t>(h)], 1.0f);
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

SegmentEntry compute_resident_entry(model::Model& model, const std::vector<int32_t>& tokens,
                                    int w) {
  const kernels::Backend& be = model.backend();
  const Device dev = be.device();
  HYPIC_REQUIRE(dev != Device::Host, "a resident entry needs a model computing on a device");
  const model::ModelConfig& cfg = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int Hv = cfg.linear_num_value_heads, dk = cfg.linear_key_head_dim,
            dv = cfg.linear_value_head_dim;
  std::vector<Tensor> state_w;
  model::InferenceCache cache = prefill_segment(model, tokens, w, state_w, false);

  // The same arrays compute_entry downloads, formed by the same ops on the device.
  SegmentEntry entry;
  entry.n_tokens = n;
  entry.junction = w;
  entry.where = dev;
  for (size_t l = 0; l < cache.layers.size(); ++l) {
    model::LayerCache& lc = cache.layers[l];
    if (model::is_linear_kind(lc.kind)) {
      const bool scalar = scalar_kind(lc.kind);
      HYPIC_REQUIRE(
          lc.transition.numel() == (scalar ? Hv : static_cast<int64_t>(Hv) * dk * dk),
          "the forward pass did not capture the transition of layer " + std::to_string(l));
      LinearLayerEntry le;
      le.layer = static_cast<int>(l);
      LinearSummary& s = le.summary;  // dimensions only: the arrays are in `device`
      s.structure = scalar ? TStructure::Scalar : TStructure::Dense;
      s.heads = Hv;
      s.dk = dk;
      s.dv = dv;
      s.tokens = n - w;
      le.device.t = std::move(lc.transition);
      le.device.t.reshape({le.device.t.numel()});
      le.device.s = std::move(lc.state);
      le.device.s.reshape({le.device.s.numel()});
      float* st = model::f32(le.device.s);
      const float* sw = w > 0 ? model::f32(state_w[l]) : nullptr;
      const int64_t per = static_cast<int64_t>(dk) * dv;
      if (w > 0 && scalar) {  // S(R|0) = S_n − t_h · S_w: H scalars come down, one op per head
        const std::vector<float> t = le.device.t.to_vector();
        for (int h = 0; h < Hv; ++h)
          be.axpby(sw + h * per, st + h * per, per, -t[static_cast<size_t>(h)], 1.0f);
      } else if (w > 0) {  // S(R|0) = S_n − T_R · S_w, head by head
        be.gemm_strided_batched(false, false, dk, dv, dk, -1.0f, model::f32(le.device.t), dk,
                                int64_t(dk) * dk, sw, dv, per, 1.0f, st, dv, per, Hv);
      }
      le.conv = std::move(lc.conv);
      entry.linear.push_back(std::move(le));
    } else {
      AttentionLayerEntry ae;
      ae.layer = static_cast<int>(l);
      auto tail = [&](const Tensor& t) {  // rows w … n−1, copied within the device
        const int64_t row = t.dim(1) * t.dim(2);
        Tensor out({n - w, t.dim(1), t.dim(2)}, DType::F32, dev, &be);
        if (!out.empty()) be.copy_within(out.raw(), model::f32(t) + w * row, out.bytes());
        return out;
      };
      ae.k = tail(lc.k);
      if (lc.kind != model::LayerKind::Mla) ae.v = tail(lc.v);
      entry.attention.push_back(std::move(ae));
    }
  }
  return entry;
}

SegmentEntry download_entry(const SegmentEntry& resident) {
  HYPIC_REQUIRE(resident.resident(), "download_entry: the entry is already in host memory");
  SegmentEntry out;
  out.n_tokens = resident.n_tokens;
  out.junction = resident.junction;
  for (const LinearLayerEntry& l : resident.linear) {
    LinearLayerEntry le;
    le.layer = l.layer;
    le.summary = l.summary;  // dimensions (the host vectors of a resident entry are empty)
    auto down = [](const Tensor& t) { return t.empty() ? std::vector<float>() : t.to_vector(); };
    le.summary.t = down(l.device.t);
    le.summary.x = down(l.device.x);
    le.summary.y = down(l.device.y);
    le.summary.s = down(l.device.s);
    if (l.conv.rank() > 0) le.conv = l.conv.to(Device::Host);
    out.linear.push_back(std::move(le));
  }
  for (const AttentionLayerEntry& a : resident.attention) {
    AttentionLayerEntry ae;
    ae.layer = a.layer;
    ae.k = a.k.to(Device::Host);
    if (a.v.rank() > 0) ae.v = a.v.to(Device::Host);
    out.attention.push_back(std::move(ae));
  }
  stats::count_entry_copy(out.bytes());
  return out;
}

store::Entry take_arrays(SegmentEntry&& entry) {
  store::Entry out;
  out.n_tokens = entry.n_tokens;
  const bool resident = entry.resident();
  for (LinearLayerEntry& l : entry.linear) {
    LinearSummary& s = l.summary;
    if (!l.s_forms.empty()) {  // S with heads in fp8 (host entries only)
      add_packed_s(l, out);
    } else {
      Tensor st = resident ? std::move(l.device.s)
                           : Tensor::from_vector({s.heads, s.dk, s.dv}, std::move(s.s));
      st.reshape({s.heads, s.dk, s.dv});
      out.arrays.emplace(linear_name(l.layer, "S"), std::move(st));
    }
    if (!l.t_forms.empty()) {  // per-head forms (host entries only)
      add_packed_t(l, out);
      if (l.conv.rank() > 0) out.arrays.emplace(linear_name(l.layer, "conv"), std::move(l.conv));
      continue;
    }
    Tensor t = resident ? std::move(l.device.t) : Tensor::from_vector(t_shape(s), std::move(s.t));
    t.reshape(t_shape(s));
    out.arrays.emplace(linear_name(l.layer, "T"), std::move(t));
    if (s.structure == TStructure::LowRank) {  // T's WY factors (short KDA segments)
      for (auto [name, host, device] :
           {std::tuple{"X", &s.x, &l.device.x}, std::tuple{"Y", &s.y, &l.device.y}}) {
        Tensor f =
            resident ? std::move(*device) : Tensor::from_vector(xy_shape(s), std::move(*host));
        f.reshape(xy_shape(s));
        out.arrays.emplace(linear_name(l.layer, name), std::move(f));
      }
    }
    if (l.conv.rank() > 0) out.arrays.emplace(linear_name(l.layer, "conv"), std::move(l.conv));
  }
  for (AttentionLayerEntry& a : entry.attention) {
    out.arrays.emplace(attn_name(a.layer, "K"), std::move(a.k));
    if (a.v.rank() > 0) out.arrays.emplace(attn_name(a.layer, "V"), std::move(a.v));
  }
  return out;
}

store::Entry to_store_entry(const SegmentEntry& entry) {
  HYPIC_REQUIRE(!entry.resident(), "a device-resident segment entry has no host arrays to store");
  store::Entry out;
  out.n_tokens = entry.n_tokens;
  for (const LinearLayerEntry& l : entry.linear) {
    const LinearSummary& s = l.summary;
    if (!l.s_forms.empty())
      add_packed_s(l, out);
    else
      out.arrays.emplace(linear_name(l.layer, "S"),
                         Tensor::from_vector({s.heads, s.dk, s.dv}, s.s));
    if (!l.t_forms.empty()) {
      add_packed_t(l, out);
    } else {
      out.arrays.emplace(linear_name(l.layer, "T"), Tensor::from_vector(t_shape(s), s.t));
    }
    if (l.t_forms.empty() && s.structure == TStructure::LowRank) {
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
    if (!l.s_forms.empty()) {
      out.arrays.emplace(linear_name(l.layer, "Sform"),
                         store::ArrayView{{s.heads, 4}, l.s_forms.data()});
      out.arrays.emplace(
          linear_name(l.layer, "Spack"),
          store::ArrayView{{static_cast<int64_t>(l.s_packed.size())}, l.s_packed.data()});
    } else {
      out.arrays.emplace(linear_name(l.layer, "S"),
                         store::ArrayView{{s.heads, s.dk, s.dv}, s.s.data()});
    }
    if (!l.t_forms.empty()) {
      out.arrays.emplace(linear_name(l.layer, "Tform"),
                         store::ArrayView{{s.heads, 2}, l.t_forms.data()});
      if (!l.t_packed.empty())
        out.arrays.emplace(
            linear_name(l.layer, "Tpack"),
            store::ArrayView{{static_cast<int64_t>(l.t_packed.size())}, l.t_packed.data()});
    } else {
      out.arrays.emplace(linear_name(l.layer, "T"), store::ArrayView{t_shape(s), s.t.data()});
    }
    if (l.t_forms.empty() && s.structure == TStructure::LowRank) {
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
  // Arrays in a device's memory (received through NCCL) make a resident entry: all or none.
  if (!stored.arrays.empty()) entry.where = stored.arrays.begin()->second.device();
  for (const auto& [name, t] : stored.arrays)
    HYPIC_REQUIRE(t.device() == entry.where,
                  "segment entry array " + name + " is in " + device_name(t.device()) +
                      " memory, the others in " + device_name(entry.where) + " memory");
  auto vector_or_device = [&](Tensor t, std::vector<float>& host, Tensor& device) {
    if (entry.where == Device::Host) {
      host = t.take_vector();
    } else {
      t.reshape({t.numel()});
      device = std::move(t);
    }
  };
  auto host_values = [](Tensor t) {
    return t.device() == Device::Host ? t.take_vector() : t.to(Device::Host).take_vector();
  };
  // S(C|0): the array S, or Sform / Spack (heads in fp8, decoded on the host).
  auto read_s = [&](int l, LinearLayerEntry& le) {
    LinearSummary& s = le.summary;
    if (stored.arrays.count(linear_name(l, "Sform")) == 0) {
      vector_or_device(take(stored, linear_name(l, "S"), {Hv, dk, dv}), s.s, le.device.s);
      return;
    }
    le.s_forms = host_values(take(stored, linear_name(l, "Sform"), {Hv, 4}));
    const auto pk = stored.arrays.find(linear_name(l, "Spack"));
    HYPIC_REQUIRE(pk != stored.arrays.end(),
                  "segment entry lacks array " + linear_name(l, "Spack"));
    HYPIC_REQUIRE(pk->second.rank() == 1, "segment entry array " + pk->first + " has shape " +
                                              pk->second.shape_str() + ", not one dimension");
    le.s_packed = host_values(std::move(pk->second));
    stored.arrays.erase(pk);
    const std::string problem = unpack_s(le.s_forms, le.s_packed, s);
    HYPIC_REQUIRE(problem.empty(), "segment entry layer " + std::to_string(l) + ": " + problem);
    if (entry.where != Device::Host) {
      le.device.s =
          Tensor::from_vector({static_cast<int64_t>(s.s.size())}, std::move(s.s)).to(entry.where);
      s.s.clear();
    }
  };
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
      // T in per-head forms (entry_forms.hpp): Tform [Hv, 2] and Tpack, unpacked on the host.
      if (!scalar && stored.arrays.count(linear_name(l, "Tform")) > 0) {
        s.heads = static_cast<int>(Hv);
        s.dk = static_cast<int>(dk);
        s.dv = static_cast<int>(dv);
        s.tokens = n - w;
        le.t_forms = host_values(take(stored, linear_name(l, "Tform"), {Hv, 2}));
        const auto pk = stored.arrays.find(linear_name(l, "Tpack"));
        if (pk != stored.arrays.end()) {
          HYPIC_REQUIRE(pk->second.rank() == 1, "segment entry array " + pk->first + " has shape " +
                                                    pk->second.shape_str() + ", not one dimension");
          le.t_packed = host_values(std::move(pk->second));
          stored.arrays.erase(pk);
        }
        const std::string problem = unpack_t(le.t_forms, le.t_packed, s);
        HYPIC_REQUIRE(problem.empty(), "segment entry layer " + std::to_string(l) + ": " + problem);
        if (entry.where != Device::Host) {  // the unpacked arrays go where the others are
          auto up = [&](std::vector<float>& v, Tensor& device) {
            if (!v.empty())
              device = Tensor::from_vector({static_cast<int64_t>(v.size())}, std::move(v))
                           .to(entry.where);
            v.clear();
          };
          up(s.t, le.device.t);
          up(s.x, le.device.x);
          up(s.y, le.device.y);
        }
        read_s(l, le);
        le.conv = take(stored, linear_name(l, "conv"),
                       {cfg.linear_conv_kernel_dim - 1, cfg.linear_conv_dim()});
        entry.linear.push_back(std::move(le));
        continue;
      }
      s.structure = scalar ? TStructure::Scalar : lowrank ? TStructure::LowRank : TStructure::Dense;
      s.heads = static_cast<int>(Hv);
      s.dk = static_cast<int>(dk);
      s.dv = static_cast<int>(dv);
      s.tokens = n - w;
      s.rank = lowrank ? static_cast<int>(n - w) : 0;
      vector_or_device(take(stored, linear_name(l, "T"), t_shape(s)), s.t, le.device.t);
      if (lowrank) {
        vector_or_device(take(stored, linear_name(l, "X"), xy_shape(s)), s.x, le.device.x);
        vector_or_device(take(stored, linear_name(l, "Y"), xy_shape(s)), s.y, le.device.y);
      }
      read_s(l, le);
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

void round_to_dtype(SegmentEntry& entry, DType dtype, const kernels::Backend* be) {
  if (dtype == DType::F32) return;
  if (entry.resident()) {  // on the device, by the same rounding (Backend::round_to_dtype)
    HYPIC_REQUIRE(be != nullptr && be->device() == entry.where,
                  "rounding a resident segment entry needs the backend of its device");
    auto round = [&](Tensor& t) {
      if (!t.empty()) be->round_to_dtype(model::f32(t), t.numel(), dtype);
    };
    for (LinearLayerEntry& l : entry.linear) {
      round(l.device.t);
      round(l.device.x);
      round(l.device.y);
      round(l.device.s);
      round(l.conv);
    }
    for (AttentionLayerEntry& a : entry.attention) {
      round(a.k);
      round(a.v);
    }
    return;
  }
  auto round = [&](float* x, size_t n) {
    store::round_in_place(dtype, x, n);
    stats::count_entry_copy(n * sizeof(float));
  };
  for (LinearLayerEntry& l : entry.linear) {
    if (!l.t_forms.empty()) {  // the store rounds the packed forms: T unpacked from them
      round(l.t_packed.data(), l.t_packed.size());
      const std::string problem = unpack_t(l.t_forms, l.t_packed, l.summary);
      HYPIC_REQUIRE(problem.empty(), "round_to_dtype: " + problem);
    } else {
      round(l.summary.t.data(), l.summary.t.size());
      if (!l.summary.x.empty()) round(l.summary.x.data(), l.summary.x.size());
      if (!l.summary.y.empty()) round(l.summary.y.data(), l.summary.y.size());
    }
    if (!l.s_forms.empty()) {  // fp8 codes must survive the store's rounding bit for bit
      HYPIC_REQUIRE(fp8_fits_store(dtype), std::string("an entry with fp8 forms cannot be ") +
                                               "stored as " + dtype_name(dtype));
      round(l.s_packed.data(), l.s_packed.size());
      const std::string problem = unpack_s(l.s_forms, l.s_packed, l.summary);
      HYPIC_REQUIRE(problem.empty(), "round_to_dtype: " + problem);
    } else {
      round(l.summary.s.data(), l.summary.s.size());
    }
    if (l.conv.rank() > 0) round(l.conv.data(), static_cast<size_t>(l.conv.numel()));
  }
  for (AttentionLayerEntry& a : entry.attention) {
    round(a.k.data(), static_cast<size_t>(a.k.numel()));
    if (a.v.rank() > 0) round(a.v.data(), static_cast<size_t>(a.v.numel()));
  }
}

}  // namespace hypic::pic
