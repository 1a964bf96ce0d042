// Elementwise kernels: GELU (tanh approximation) and the residual add.
#pragma once
#include <cstdint>

namespace braid::kernels {

/// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2; GPT-2's "gelu_new",
/// torch.nn.functional.gelu(approximate="tanh")):
///   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
///   out (N) written; inp (N)
void gelu_forward(float* out, const float* inp, int64_t N);

/// dinp = dout * gelu'(inp), written (=). dinp may alias dout (in place).
///   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
///   t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N);

/// out = inp1 + inp2   (N) each; out may alias an input.
void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N);

/// dinp1 += dout; dinp2 += dout   (N) each. ACCUMULATES (+=): both inputs are
/// residual-stream tensors whose gradients collect several contributions. The
/// GPT model keeps a single residual-gradient buffer and so never calls this
/// (the add's backward is the identity); it exists for layouts that split the
/// stream and for the finite-difference tests.
void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t N);

}  // namespace braid::kernels
