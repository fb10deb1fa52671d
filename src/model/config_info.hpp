#pragma once
// What a config.json alone says about a model (`hypic model info --config`): its layers,
// parameters and the bytes it caches, without weights. For the architectures hypic runs the
// figures come from the same tensor layout the loader checks (model/checkpoint.hpp); for
// published hybrids hypic does not run yet (kimi_linear, bailing_moe_linear) a config-only count
// from the checkpoint's tensor list is used, and the summary says so.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace hypic::model {

struct ConfigSummary {
  std::string model_type;    // config.json's model_type
  std::string architecture;  // hypic's architecture name, or the model_type when not runnable
  bool runnable = false;     // hypic loads and runs this architecture
  std::string linear_kind;   // "Gated DeltaNet", "KDA", ...
  std::string full_kind;     // "gated attention", "MLA", ...
  int layers = 0, linear_layers = 0, full_layers = 0;
  uint64_t total_parameters = 0;      // the text decoder: embeddings, layers, norm, lm_head
  uint64_t active_parameters = 0;     // per token: total minus the routed experts not chosen
  uint64_t embedding_parameters = 0;  // embed_tokens and an untied lm_head
  // Cache sizes in the store's default dtype (bf16, 2 bytes per value).
  uint64_t kv_bytes_per_token = 0;     // K and V (or MLA's latent) of every full layer
  uint64_t entry_fixed_bytes = 0;      // a segment entry's linear-layer part: T, S, conv tail
  uint64_t entry_bytes_per_token = 0;  // a segment entry's attention part, per cached token
  std::string entry_t_form;            // how T is kept per head ("dense dk x dk", "scalar")
  // Delta rules (T dense dk × dk per value head; 0 otherwise): a segment entry's bytes of T and
  // of S(C|0), all linear layers, bf16, and of S in fp8 (docs/entry-forms.md: dk row exponents
  // and dk·dv/2 code pairs per head). The conv tail is entry_fixed_bytes minus T and S.
  uint64_t entry_t_bytes = 0, entry_s_bytes = 0, entry_s_fp8_bytes = 0;
  // KDA: a segment of r ≤ entry_lowrank_max_tokens cached tokens keeps T in its WY form, so
  // its linear part is entry_lowrank_base_bytes + r · entry_lowrank_bytes_per_token (bf16)
  // instead of entry_fixed_bytes. 0: the architecture keeps no low-rank form.
  int entry_lowrank_max_tokens = 0;
  uint64_t entry_lowrank_base_bytes = 0;
  uint64_t entry_lowrank_bytes_per_token = 0;
};

// Throws hypic::Error (one line, naming the field) for a config it cannot read, and for a
// model_type it knows neither as a runnable architecture nor as a config-only count.
ConfigSummary summarize_config(const nlohmann::json& root);

}  // namespace hypic::model
