#pragma once
// Element-wise activations and gates of the forward pass (MATH.md §7). Row-major, f32.
// Implementation: kernels/host/activation.cpp.
#include <cstdint>

namespace hypic::kernels {

// SwiGLU on a fused gate/up projection: gate_up [rows, 2·width] holds per row the gate
// half then the up half; out[r, i] = silu(gate[r, i]) · up[r, i], out [rows, width].
void swiglu(const float* gate_up, float* out, int rows, int width);

// Output gate of full attention: x[r, c] *= sigmoid(gate[r·gate_ld + c]) for a [rows, cols]
// block x (leading dimension cols) and a gate read with its own leading dimension.
void sigmoid_gate(float* x, const float* gate, int rows, int cols, int gate_ld);

// x[r, c] += s[r] · y[r, c] with s[r] = sigmoid(logit[r]) (the shared expert's gate).
void add_sigmoid_scaled(float* x, const float* y, const float* logit, int rows, int cols);

// y[i] = a · x[i] + b · y[i] for i < n; with b = 0, y is only written (MiniMax's scaled
// residuals: h = alpha · norm(h) + beta · layer(norm(h))). y may alias x.
void axpby(const float* x, float* y, int64_t n, float a, float b);

// Gated DeltaNet gates from the b and a projections, per token and value head:
//   beta = sigmoid(b),  g = −exp(A_log) · softplus(a + dt_bias)   (log decay, ≤ 0).
// b, a read with leading dimension ld (rows = tokens, cols = heads); beta, g are [rows, heads].
void gdn_gates(const float* b, const float* a, int ld, const float* A_log, const float* dt_bias,
               float* beta, float* g, int rows, int heads);

}  // namespace hypic::kernels
