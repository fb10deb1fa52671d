// `hypic model init` and `hypic model info`.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "hypic/error.hpp"
#include "model/checkpoint.hpp"
#include "model/config_info.hpp"
#include "model/presets.hpp"
#include "model/tokenizer.hpp"

namespace hypic::app {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull)
    std::snprintf(buf, sizeof(buf), "%.2f B", static_cast<double>(n) / 1e9);
  else if (n >= 1000000ull)
    std::snprintf(buf, sizeof(buf), "%.2f M", static_cast<double>(n) / 1e6);
  else if (n >= 1000ull)
    std::snprintf(buf, sizeof(buf), "%.1f K", static_cast<double>(n) / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%" PRIu64, n);
  return buf;
}

int run_init(const std::string& arch, const std::string& preset, uint64_t seed,
             const std::string& out, const std::string& dtype_name) {
  using namespace hypic::model;
  const DType dtype = parse_dtype(dtype_name);
  const ModelConfig cfg = preset_config(parse_arch(arch), preset);
  const ModelWeights w = random_weights(cfg, seed);
  save_checkpoint(out, cfg, w, dtype);
  std::printf("wrote %s: %s preset '%s', seed %" PRIu64 ", %s parameters, %s weights\n",
              out.c_str(), arch.c_str(), preset.c_str(), seed,
              human_count(w.parameter_count()).c_str(), hypic::dtype_name(dtype));
  return 0;
}

int run_info(const std::string& dir) {
  using namespace hypic::model;
  const LoadedModel m = load_checkpoint(dir);
  const ModelConfig& c = m.config;
  const uint64_t params = m.weights.parameter_count();
  std::printf("model        : %s\n", dir.c_str());
  std::printf("architecture : %s\n", arch_name(c.arch));
  const bool lightning =
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerKind::Lightning) > 0;
  const char* lin_name = lightning ? "lightning attention" : "Gated DeltaNet";
  const char* full_name = c.attention_output_gate ? "gated attention" : "softmax attention";
  std::printf("layers       : %d (%d %s, %d %s)\n", c.num_hidden_layers, c.num_linear_layers(),
              lin_name, c.num_full_layers(), full_name);
  std::printf("layout       : %s   (L = %s, A = %s)\n", c.layout_string().c_str(), lin_name,
              full_name);
  std::printf("hidden       : %d, vocab %d, %s embeddings\n", c.hidden_size, c.vocab_size,
              c.tie_word_embeddings ? "tied" : "untied");
  std::printf(
      "attention    : %d query heads, %d KV heads, head_dim %d, RoPE on %d dims "
      "(theta %g)\n",
      c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta);
  if (lightning) {
    // A segment entry keeps, per lightning layer, T as one scalar per head (its decay
    // e^(-n·slope)) and S: the bytes against a dense dk x dk T, f32.
    const uint64_t H = static_cast<uint64_t>(c.num_attention_heads);
    const uint64_t d = static_cast<uint64_t>(c.head_dim);
    std::printf(
        "lightning    : %d heads x %d, one constant decay per head; entry per layer: T %" PRIu64
        " B (scalar per head; dense %" PRIu64 " B) + S %" PRIu64 " B, f32\n",
        c.num_attention_heads, c.head_dim, H * 4, H * d * d * 4, H * d * d * 4);
  } else {
    std::printf("delta net    : %d key heads x %d, %d value heads x %d, conv kernel %d\n",
                c.linear_num_key_heads, c.linear_key_head_dim, c.linear_num_value_heads,
                c.linear_value_head_dim, c.linear_conv_kernel_dim);
  }
  if (c.num_experts > 0)
    std::printf(
        "experts      : %d routed (top %d, width %d)%s\n", c.num_experts, c.num_experts_per_tok,
        c.moe_intermediate_size,
        c.shared_expert_intermediate_size > 0
            ? (" + shared (width " + std::to_string(c.shared_expert_intermediate_size) + ")")
                  .c_str()
            : ", no shared expert");
  std::printf("per layer    :\n");
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerKind kind = c.layer_types[static_cast<size_t>(i)];
    const char* what = kind == LayerKind::Linear       ? "gated deltanet"
                       : kind == LayerKind::Lightning  ? "lightning attn"
                       : kind == LayerKind::RingLinear ? "lightning attn (RoPE)"
                       : kind == LayerKind::Kda        ? "kda"
                       : kind == LayerKind::Mla        ? "mla"
                       : c.attention_output_gate       ? "gated attention"
                                                       : "attention";
    std::string mlp =
        c.layer_is_moe(i) ? "MoE" : "dense MLP (" + std::to_string(c.intermediate_size) + ")";
    std::printf("  %3d  %-16s %s\n", i, what, mlp.c_str());
  }
  std::printf("parameters   : %" PRIu64 " (%s)", params, human_count(params).c_str());
  if (c.num_experts > 0)
    std::printf(", %s active per token", human_count(config_active_parameter_count(c)).c_str());
  std::printf("\n");
  std::printf("checkpoint   : %s%s, %s of weight data\n", m.dtype.c_str(),
              m.sharded ? " (sharded)" : "",
              human_bytes(static_cast<double>(m.checkpoint_bytes)).c_str());
  std::printf("tokenizer    : %s\n", Tokenizer::for_model(dir).describe().c_str());
  std::printf(
      "memory       : %s in memory (projections %s; --weights-dtype), peak %s after "
      "loading (VmHWM)\n",
      human_bytes(static_cast<double>(m.weights.bytes())).c_str(), m.weights_dtype.c_str(),
      human_bytes(static_cast<double>(m.peak_memory_bytes)).c_str());
  if (!m.ignored.empty())
    std::printf("ignored      : %zu tensor(s) (vision tower / MTP heads)\n", m.ignored.size());
  return 0;
}

// `model info --config FILE`: what config.json alone says (no weights are read).
int run_info_config(const std::string& path) {
  using namespace hypic::model;
  const nlohmann::json root = read_json_file(path);
  ConfigSummary s;
  try {
    s = summarize_config(root);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("config.json: ", 0) == 0) msg = msg.substr(13);
    if (msg.rfind("config: ", 0) == 0) msg = msg.substr(8);
    throw Error(path + ": " + msg);
  }
  std::printf("config       : %s\n", path.c_str());
  std::printf("architecture : %s (model_type %s)%s\n", s.architecture.c_str(), s.model_type.c_str(),
              s.runnable ? "" : " -- config-only count, hypic cannot run this architecture yet");
  std::printf("layers       : %d (%d %s, %d %s)\n", s.layers, s.linear_layers,
              s.linear_kind.c_str(), s.full_layers, s.full_kind.c_str());
  std::printf("parameters   : %" PRIu64 " (%s) total, %" PRIu64
              " (%s) active per token, %s of them without the embeddings\n",
              s.total_parameters, human_count(s.total_parameters).c_str(), s.active_parameters,
              human_count(s.active_parameters).c_str(),
              human_count(s.active_parameters - s.embedding_parameters).c_str());
  std::printf("kv cache     : %" PRIu64 " bytes per token (bf16, %d full-attention layers)\n",
              s.kv_bytes_per_token, s.full_layers);
  std::printf("segment entry: %" PRIu64
              " bytes (%s) per segment for the %d linear layers + %" PRIu64
              " bytes per cached token (bf16; T %s)\n",
              s.entry_fixed_bytes, human_bytes(static_cast<double>(s.entry_fixed_bytes)).c_str(),
              s.linear_layers, s.entry_bytes_per_token, s.entry_t_form.c_str());
  if (s.entry_t_bytes > 0) {
    // Per-head forms (docs/entry-forms.md) at their two ends, for a 512-token segment with a
    // junction of 8 (504 cached tokens), beside the K/V a pure-attention model of the same
    // shape (every layer full attention) keeps for those tokens.
    constexpr uint64_t kCached = 504;
    const uint64_t kv = s.entry_bytes_per_token * kCached,
                   conv = s.entry_fixed_bytes - s.entry_t_bytes - s.entry_s_bytes;
    const uint64_t absent = s.entry_s_bytes + conv + kv, fp8 = s.entry_s_fp8_bytes + conv + kv,
                   dense = s.entry_fixed_bytes + kv;
    std::printf(
        "entry forms  : a 512-token segment (504 cached, junction 8), bf16 store: T dense "
        "%" PRIu64 " bytes (today); T absent %" PRIu64 " (%.3f); T absent + S fp8 %" PRIu64
        " (%.3f, the smallest the forms reach); each with K/V %" PRIu64 "\n",
        dense, absent, static_cast<double>(absent) / static_cast<double>(dense), fp8,
        static_cast<double>(fp8) / static_cast<double>(dense), kv);
    if (s.full_layers > 0)
      std::printf(
          "               a pure-attention model of this shape (%d layers of K/V) keeps "
          "%" PRIu64 " bytes for those tokens\n",
          s.layers, s.kv_bytes_per_token / s.full_layers * s.layers * kCached);
  }
  if (s.entry_lowrank_max_tokens > 0) {
    const int r = s.entry_lowrank_max_tokens, half = r / 2 + 1;
    const uint64_t at_half = s.entry_lowrank_base_bytes + half * s.entry_lowrank_bytes_per_token;
    std::printf(
        "short segment: up to %d cached tokens keep T in its WY form diag(g) - X^T Y "
        "(exact): %" PRIu64 " + %" PRIu64
        " bytes per cached token for the %d linear "
        "layers, e.g. %s at %d tokens (dense T: %s)\n",
        r, s.entry_lowrank_base_bytes, s.entry_lowrank_bytes_per_token, s.linear_layers,
        human_bytes(static_cast<double>(at_half)).c_str(), half,
        human_bytes(static_cast<double>(s.entry_fixed_bytes)).c_str());
  }
  return 0;
}

}  // namespace

void add_model_commands(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Create or inspect model checkpoints");
  model->require_subcommand(1);

  auto* init = model->add_subcommand(
      "init", "Write a random-initialised checkpoint (config.json + model.safetensors)");
  struct InitOpts {
    std::string arch, preset, out, dtype = "f32";
    uint64_t seed = 0;
  };
  auto io = std::make_shared<InitOpts>();
  // The registered architectures and their presets (preset_config checks the pair).
  std::vector<std::string> archs, presets;
  for (const model::ArchSpec* a : model::architectures()) {
    archs.push_back(a->name());
    for (const std::string& p : a->preset_names())
      if (std::find(presets.begin(), presets.end(), p) == presets.end()) presets.push_back(p);
  }
  init->add_option("--arch", io->arch, "Architecture")->required()->check(CLI::IsMember(archs));
  init->add_option("--preset", io->preset, "Model size")->required()->check(CLI::IsMember(presets));
  init->add_option("--seed", io->seed, "Random seed")->required();
  init->add_option("--out", io->out, "Output folder")->required();
  init->add_option("--dtype", io->dtype, "Stored dtype")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  on_run(init, [io] { return run_init(io->arch, io->preset, io->seed, io->out, io->dtype); });

  auto* info = model->add_subcommand(
      "info", "Print a checkpoint's layer layout, size and dtype (or a config.json's, --config)");
  auto dir = std::make_shared<std::string>();
  auto config = std::make_shared<std::string>();
  auto* model_opt = info->add_option("--model", *dir, "Model folder (config.json + safetensors)");
  auto* config_opt =
      info->add_option("--config", *config, "A config.json alone: parameters and cache sizes");
  model_opt->excludes(config_opt);
  // Not require_option(1): that counts the options every command takes (--threads,
  // --weights-dtype) too, so `model info --model DIR --threads 1` was refused.
  on_run(info, [dir, config] {
    HYPIC_REQUIRE(!dir->empty() || !config->empty(),
                  "model info needs --model DIR or --config FILE");
    return config->empty() ? run_info(*dir) : run_info_config(*config);
  });

  add_model_check_command(*model);
}

}  // namespace hypic::app
