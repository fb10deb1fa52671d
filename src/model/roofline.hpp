#pragma once
// A roofline cost model of one prefill (`hypic bench roofline`): per op class, the FLOPs, the
// compulsory bytes moved to and from device memory, and the roofline time
// max(FLOPs / peak, bytes / bandwidth); the total is the sum of the classes' times (the classes
// run one after another). The matrix-product FLOPs follow model/flops.hpp's count exactly (the
// classes' sum equals prefill_flops().total()); docs/gpu.md gives every rule.
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace hypic::model {

// A GPU's dense bf16 tensor-core peak (f32 accumulation, no sparsity) and memory bandwidth.
struct GpuPeak {
  std::string name;  // "h100", "h200", ...
  double bf16_tflops = 0;
  double bandwidth_gbs = 0;  // GB/s (1e9 bytes)
  std::string what;          // the card, in words
};

// The built-in table (vendor data sheets); gpu_peak throws hypic::Error listing the names for
// one it does not know. Names are matched case-insensitively.
const std::vector<GpuPeak>& gpu_peaks();
const GpuPeak& gpu_peak(const std::string& name);

struct RooflineOptions {
  int64_t tokens = 32768;  // prompt length (cold: nothing cached)
  double peak_flops = 0;   // FLOP/s, > 0
  double bandwidth = 0;    // bytes/s, > 0
  int chunk = 64;          // the chunked linear-attention family's chunk length
  int weight_bytes = 2;    // bf16 weights
  int act_bytes = 2;       // bf16 activations
  int state_bytes = 4;     // f32 recurrent states
};

struct OpClassCost {
  std::string name;  // "projections", "attention", "linear_attention", "mlp", "moe_experts",
                     // "norms_elementwise", "embedding_lm_head"
  double flops = 0;
  double bytes = 0;
  double seconds = 0;          // max(flops / peak, bytes / bandwidth)
  bool compute_bound = false;  // FLOPs / peak >= bytes / bandwidth
};

struct Roofline {
  std::vector<OpClassCost> classes;  // in the order above, every class listed (zeros included)
  double flops = 0, bytes = 0;
  double seconds = 0;                                    // Σ classes' seconds
  const OpClassCost& at(const std::string& name) const;  // throws for an unknown name
};

// Throws hypic::Error for tokens < 1 or a non-positive peak or bandwidth.
Roofline prefill_roofline(const ModelConfig& cfg, const RooflineOptions& options);

}  // namespace hypic::model
