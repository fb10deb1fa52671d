#pragma once
// Segment entries (MATH.md §2-§5): what is cached for one segment, computed in isolation
// at segment-local positions, for the tokens after its junction window R = c_w … c_{n−1}:
//   linear layer    T_R [Hv, dk, dk], S(R|0) [Hv, dk, dv], conv tail [K−1, conv_dim]
//   KDA layer       the same, or for r = n − w ≤ lowrank_max_tokens(dk) cached tokens T_R in
//                   its exact WY form diag(γ) − XᵀY: γ [Hv, dk], X, Y [Hv, r, dk]
//   lightning layer T_R [H] (one scalar per head), S(R|0) [H, hd, hd], no conv
//   attention layer K, V [n − w, Hkv, hd], K rotated at local positions w … n−1
// and the conversion to and from the store's named arrays.
#include <cstdint>
#include <string>
#include <vector>

#include "model/forward.hpp"
#include "pic/entry_forms.hpp"
#include "pic/linear_summary.hpp"
#include "store/entry.hpp"

namespace hypic::pic {

// A summary's arrays in a device's memory (1-D f32 tensors; empty where the summary has
// none): an entry resident on the device (entry_upload.hpp) holds these instead of the host
// vectors of its LinearSummary, which keeps only its dimensions.
struct DeviceSummary {
  Tensor t, x, y, s;
};

struct LinearLayerEntry {
  int layer = 0;
  LinearSummary summary;  // T_R (Dense, or LowRank for short KDA segments; Scalar for
                          // lightning layers) and S(R|0)
  Tensor conv;            // the layer's conv state after the whole segment (none: lightning)
  DeviceSummary device;   // resident entries only
  // T in its chosen per-head forms (entry_forms.hpp; empty: T as `summary` holds it). When
  // set, the store keeps these instead of T, and `summary` holds their unpacked form.
  std::vector<float> t_forms, t_packed;
  // S(C|0) with some heads in fp8 (entry_forms.hpp; empty: S as `summary` holds it): the store
  // keeps these instead of S, and `summary.s` holds their decoded values.
  std::vector<float> s_forms, s_packed;
};

struct AttentionLayerEntry {
  int layer = 0;
  Tensor k;  // [n − w, Hkv, hd] after k_norm and RoPE at local positions w … n−1
  Tensor v;  // [n − w, Hkv, hd]; empty for MLA (k holds the latent rows, no RoPE)
};

// An entry lives in host memory (as computed, stored and sent between ranks) or is resident
// on a device: every array in that device's memory (conv, K, V as device tensors, the
// summaries in `device`), uploaded once into the memory tier and spliced from there by every
// query that hits it.
struct SegmentEntry {
  int64_t n_tokens = 0;  // the whole segment, junction window included
  int junction = 0;      // w: the window's tokens, recomputed at reuse and not cached
  std::vector<LinearLayerEntry> linear;
  std::vector<AttentionLayerEntry> attention;
  Device where = Device::Host;  // Device::Cuda: resident (see above)
  uint64_t upload_ticket = 0;   // resident: its last upload (Backend::upload_fence)

  int64_t cached_tokens() const { return n_tokens - junction; }
  bool resident() const { return where != Device::Host; }
  size_t bytes() const;  // in memory (f32), host or device
};

// The structure of T_R an entry keeps for a linear layer of `kind` over `cached_tokens` tokens
// (head dim dk): Scalar for lightning layers; for KDA the WY form while it is smaller than the
// dense matrix (dk + 2·r·dk < dk², i.e. r ≤ lowrank_max_tokens(dk); both exact); Dense
// otherwise (Gated DeltaNet entries stay dense).
TStructure entry_t_structure(model::LayerKind kind, int64_t cached_tokens, int dk);

// Replaces every dense T of a host entry by its per-head forms chosen at `tolerance`
// (entry_forms.hpp): the summary then holds the approximation, t_forms / t_packed what the
// store keeps. A layer whose heads all stay dense is left as it is, so tolerance 0 changes
// nothing. fp8 forms of T and S are candidates where the store's dtype keeps them
// (fp8_fits_store: bf16, f32). `tally` (nullable) receives the forms' counts and floats.
void choose_entry_forms(SegmentEntry& entry, double tolerance, DType store_dtype,
                        FormTally* tally = nullptr);
// "" or why a store of `dtype` cannot keep this entry's arrays: fp8 forms (Tform rows of form
// 5, Sform rows of form 1) in a store whose rounding would change their codes (f16).
std::string fp8_store_problem(const store::Entry& entry, DType dtype);

// Computes the entry of `tokens` with a junction window of w tokens (0 ≤ w < n), from an
// empty cache: prefill c_0 … c_{w−1}, keep each linear layer's state S_w, prefill the rest
// capturing T_R, then S(R|0) = S_n − T_R · S_w (exact by linearity).
SegmentEntry compute_entry(model::Model& model, const std::vector<int32_t>& tokens, int w);
// The same entry left where the model computed it: resident on the model's device (as
// EntryUploader would leave its host copy), with no download and no upload. The model must
// compute on a device. download_entry of it equals compute_entry bit for bit.
SegmentEntry compute_resident_entry(model::Model& model, const std::vector<int32_t>& tokens, int w);
// A host copy of a resident entry (the store's and the MPI messages' format).
SegmentEntry download_entry(const SegmentEntry& resident);

// Store arrays: "linear/<l>/T", "linear/<l>/S", "linear/<l>/conv", "attn/<l>/K", "attn/<l>/V"
// (l = the model's layer index); a low-rank T adds "linear/<l>/X" and "linear/<l>/Y" (T holds
// its diagonal part [Hv, dk]); T in per-head forms is "linear/<l>/Tform" [Hv, 2] and
// "linear/<l>/Tpack" [n] instead of T (Tpack absent when every head is absent).
store::Entry to_store_entry(const SegmentEntry& entry);
// The same arrays by reference (no copy), for SegmentStore::put; valid while `entry` lives.
store::EntryView store_view(const SegmentEntry& entry);
// The arrays of an entry, host or resident, moved out under the store's names (device tensors
// for a resident entry): what the NCCL path sends (cluster/device_entries.hpp).
store::Entry take_arrays(SegmentEntry&& entry);
// The inverse, checking every array's presence and shape against the model; consumes
// `stored`. Throws hypic::Error naming the first array that does not fit. Arrays in a device's
// memory (all of them, received through NCCL) make a resident entry.
SegmentEntry from_store_entry(store::Entry&& stored, const model::ModelConfig& config, int w);

// Rounds every array of `entry` to what the store keeps in `dtype`, so an entry used right
// after it is computed composes exactly as it will when read back. A resident entry is rounded
// on the device by `be` (its backend; required then).
void round_to_dtype(SegmentEntry& entry, DType dtype, const kernels::Backend* be = nullptr);

}  // namespace hypic::pic
