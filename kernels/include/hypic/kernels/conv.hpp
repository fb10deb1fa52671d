#pragma once
// Depthwise causal conv1d with SiLU over time (MATH.md §3), continuing from a conv state.
namespace hypic::kernels {

// x     : [T, C] pre-conv, pre-activation inputs
// w     : [C, K] per-channel kernel (Hugging Face's conv1d.weight [C, 1, K] squeezed)
// state : [K-1, C] the K-1 inputs before x, oldest first (zeros at a sequence start);
//         overwritten with the last K-1 inputs of (state ++ x): the "conv tail"
// y     : [T, C], y[t,c] = silu(Σ_j w[c,j] · u[t+j, c]) where u = state ++ x
void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int T, int C,
                        int K);

// Only the state update of causal_conv1d_silu: state ← last K-1 rows of (state ++ x). This is
// the conv tail a segment entry caches (no outputs computed).
void causal_conv1d_tail(const float* x, float* state, int T, int C, int K);

}  // namespace hypic::kernels
