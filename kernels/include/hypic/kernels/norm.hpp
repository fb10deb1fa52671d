#pragma once
// Row-wise RMS normalisations (MATH.md §7). x, y: [rows, cols]; y may alias x.
namespace hypic::kernels {

// y = x · rsqrt(mean x² + eps) · (1 + w)   (Qwen3-Next / Qwen3.5 zero-centred weight)
void rms_norm_zero_centred(const float* x, const float* w, float* y, int rows, int cols, float eps);

// y = x · rsqrt(mean x² + eps) · w   (plain RMSNorm: Kimi, MiniMax, Ring)
void rms_norm(const float* x, const float* w, float* y, int rows, int cols, float eps);

// y = w · x · rsqrt(mean x² + eps) · silu(z)   (gated norm of linear-attention layers)
void gated_rms_norm(const float* x, const float* z, const float* w, float* y, int rows, int cols,
                    float eps);

// Per-row x / sqrt(Σx² + eps) · scale  (q/k normalisation of Gated DeltaNet, eps 1e-6)
void l2_normalize_rows(float* x, int rows, int cols, float eps, float scale);

}  // namespace hypic::kernels
