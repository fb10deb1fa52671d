#include "model/roofline.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "hypic/error.hpp"

namespace hypic::model {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Element-wise costs (docs/gpu.md): FLOPs and bytes (in activation units) per element.
constexpr double kNormFlops = 4, kNormReads = 1, kNormWrites = 1;  // x² sum, scale, weight
constexpr double kGateFlops = 4, kGateReads = 2, kGateWrites = 1;  // sigmoid/SiLU, multiply
constexpr double kGatedNormFlops = kNormFlops + kGateFlops;        // norm, then the gate
constexpr double kAddFlops = 1, kAddReads = 2, kAddWrites = 1;     // residual add
constexpr double kScatterFlops = 2;                                // weight, accumulate

enum Class { kProj, kAttn, kLinear, kMlp, kMoe, kElem, kEmbed, kClasses };
const char* const kClassNames[kClasses] = {
    "projections", "attention",         "linear_attention", "mlp",
    "moe_experts", "norms_elementwise", "embedding_lm_head"};

}  // namespace

const std::vector<GpuPeak>& gpu_peaks() {
  // Dense bf16 tensor-core TFLOP/s (no 2:4 sparsity) and HBM bandwidth, from NVIDIA's data
  // sheets.
  static const std::vector<GpuPeak> table = {
      {"h100", 989, 3350, "H100 SXM5 80 GB"},    {"h100-pcie", 756, 2000, "H100 PCIe 80 GB"},
      {"h100-nvl", 835, 3900, "H100 NVL 94 GB"}, {"h200", 989, 4800, "H200 SXM 141 GB"},
      {"a100", 312, 2039, "A100 SXM4 80 GB"},    {"h20", 148, 4000, "H20 96 GB"},
  };
  return table;
}

const GpuPeak& gpu_peak(const std::string& name) {
  const std::string want = lower(name);
  std::string names;
  for (const GpuPeak& g : gpu_peaks()) {
    if (g.name == want) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw Error("unknown GPU '" + name + "' (known: " + names +
              "; or give --peak-tflops and --bandwidth-gbs)");
}

const OpClassCost& Roofline::at(const std::string& name) const {
  for (const OpClassCost& c : classes)
    if (c.name == name) return c;
  throw Error("roofline: no op class '" + name + "'");
}

Roofline prefill_roofline(const ModelConfig& c, const RooflineOptions& o) {
  HYPIC_REQUIRE(o.tokens >= 1, "roofline: --tokens must be at least 1");
  HYPIC_REQUIRE(o.peak_flops > 0 && std::isfinite(o.peak_flops),
                "roofline: the peak FLOP/s must be positive");
  HYPIC_REQUIRE(o.bandwidth > 0 && std::isfinite(o.bandwidth),
                "roofline: the bandwidth must be positive");
  HYPIC_REQUIRE(o.chunk >= 1, "roofline: the chunk length must be at least 1");
  const double T = static_cast<double>(o.tokens);
  const double h = c.hidden_size;
  const double wb = o.weight_bytes, ab = o.act_bytes, sb = o.state_bytes;
  const double C = std::min<double>(o.chunk, T);
  double flops[kClasses] = {}, bytes[kClasses] = {};
  // A product [T, in] x [in, out]: its FLOPs, weights and activations (input read, output
  // written) into class k.
  auto gemm = [&](Class k, double in, double out) {
    flops[k] += 2.0 * T * in * out;
    bytes[k] += wb * in * out + ab * T * (in + out);
  };
  // An element-wise pass over n elements.
  auto elementwise = [&](double n, double f, double reads, double writes) {
    flops[kElem] += f * n;
    bytes[kElem] += ab * n * (reads + writes);
  };

  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerKind kind = c.layer_types[layer];
    // Two RMSNorms (input, post-attention) and two residual adds per layer.
    elementwise(2.0 * T * h, kNormFlops, kNormReads, kNormWrites);
    elementwise(2.0 * T * h, kAddFlops, kAddReads, kAddWrites);
    if (kind == LayerKind::Lightning || kind == LayerKind::RingLinear) {
      // q, k, v and the output gate in one product; out_proj.
      const double width = static_cast<double>(c.num_attention_heads) * c.head_dim;
      gemm(kProj, h, 4.0 * width);
      gemm(kProj, width, h);
      const double H = c.num_attention_heads, d = c.head_dim;
      flops[kLinear] += 2.0 * T * H * (2.0 * d * d + C * 2.0 * d);
      bytes[kLinear] += ab * T * 4.0 * H * d + sb * 2.0 * H * d * d;  // q, k, v, out; S in/out
      elementwise(T * width, kGatedNormFlops, kGateReads, kGateWrites);
    } else if (is_linear_kind(kind)) {  // Gated DeltaNet; KDA counted as Gated DeltaNet
      const double Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads;
      const double dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const double in_rows =
          c.linear_conv_dim() + c.linear_value_dim() + 2.0 * c.linear_num_value_heads;
      gemm(kProj, h, in_rows);
      gemm(kProj, c.linear_value_dim(), h);
      flops[kLinear] += 2.0 * T * Hv * (3.0 * dk * dv + C * (2.0 * dk + 2.0 * dv));
      // q, k, v, g, beta read; out written; the state read and written.
      bytes[kLinear] +=
          ab * T * (2.0 * Hk * dk + 2.0 * Hv * dv + 2.0 * Hv) + sb * 2.0 * Hv * dk * dv;
      // The causal conv over q|k|v (2·K FLOPs per element, read and written once) and the
      // gated output norm.
      const double conv = c.linear_conv_dim();
      flops[kElem] += 2.0 * c.linear_conv_kernel_dim * conv * T;
      bytes[kElem] += ab * 2.0 * conv * T;
      elementwise(T * c.linear_value_dim(), kGatedNormFlops, kGateReads, kGateWrites);
    } else {  // softmax attention (gated or not) and MLA, as model/flops.cpp counts them
      const double H = c.num_attention_heads, Hkv = c.num_key_value_heads, hd = c.head_dim;
      const double q_rows = (c.attention_output_gate ? 2.0 : 1.0) * H * hd;
      gemm(kProj, h, q_rows + 2.0 * Hkv * hd);
      gemm(kProj, H * hd, h);
      const double pairs = T * (T + 1.0) / 2.0;  // token i attends to i + 1 keys
      flops[kAttn] += 2.0 * 2.0 * pairs * hd * H;
      bytes[kAttn] += ab * T * (2.0 * H * hd + 2.0 * Hkv * hd);  // q, out; K, V once
      if (c.attention_output_gate) elementwise(T * H * hd, kGateFlops, kGateReads, kGateWrites);
    }
    if (c.layer_is_moe(layer)) {
      const double E = c.num_experts, k = c.num_experts_per_tok;
      const double m = c.moe_intermediate_size, s = c.shared_expert_intermediate_size;
      gemm(kMoe, h, E);  // router
      // Routed experts: T·k rows through gate|up [h -> 2m] and down [m -> h]; every expert a
      // token can reach is read once (min(E, T·k) of them).
      const double touched = std::min(E, T * k);
      flops[kMoe] += 2.0 * T * h * 3.0 * m * k;
      bytes[kMoe] += wb * touched * 3.0 * m * h + ab * T * k * (2.0 * h + 3.0 * m);
      // The shared expert and its one-row gate (3s + 1 rows, as model/flops.cpp).
      flops[kMoe] += 2.0 * T * h * (3.0 * s + 1.0);
      bytes[kMoe] += wb * h * (3.0 * s + 1.0) + ab * T * (2.0 * h + 3.0 * s + 1.0);
      elementwise(T * (k * m + s), kGateFlops, kGateReads, kGateWrites);  // SwiGLU
      flops[kElem] += kScatterFlops * T * k * h;  // weighted sum of the k expert outputs
      bytes[kElem] += ab * (T * k * h + 2.0 * T * h);
    } else {
      const double i = c.intermediate_size;
      gemm(kMlp, h, 2.0 * i);
      gemm(kMlp, i, h);
      elementwise(T * i, kGateFlops, kGateReads, kGateWrites);  // SwiGLU
    }
  }
  // Embedding rows gathered (bf16 table -> activations); the final norm and lm_head for the
  // last token's logits.
  const double V = c.vocab_size;
  bytes[kEmbed] += (wb + ab) * T * h;
  flops[kEmbed] += kNormFlops * h + 2.0 * h * V;
  bytes[kEmbed] += ab * 2.0 * h + wb * V * h + ab * (h + V);

  Roofline r;
  for (int k = 0; k < kClasses; ++k) {
    OpClassCost cost;
    cost.name = kClassNames[k];
    cost.flops = flops[k];
    cost.bytes = bytes[k];
    cost.seconds = std::max(flops[k] / o.peak_flops, bytes[k] / o.bandwidth);
    cost.compute_bound = flops[k] / o.peak_flops >= bytes[k] / o.bandwidth;
    r.flops += cost.flops;
    r.bytes += cost.bytes;
    r.seconds += cost.seconds;
    r.classes.push_back(cost);
  }
  return r;
}

}  // namespace hypic::model
