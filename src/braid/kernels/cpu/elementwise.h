// Elementwise kernels: GELU (tanh approximation), the residual add, dropout and
// a zero fill.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2; GPT-2's "gelu_new",
/// torch.nn.functional.gelu(approximate="tanh")):
///   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
///   out (N) written; inp (N)
void gelu_forward(float* out, const float* inp, int64_t N);
/// gelu_forward of inp stored in `dt` (f32, bf16 or f16), widened exactly; out f32.
void gelu_forward(float* out, const void* inp, DType dt, int64_t N);

/// dinp = dout * gelu'(inp), written (=). dinp may alias dout (in place).
///   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
///   t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t N);
/// gelu_backward with inp stored in `dt` (f32, bf16 or f16); dinp, dout f32.
void gelu_backward(float* dinp, const float* dout, const void* inp, DType dt, int64_t N);

/// out = inp1 + inp2   (N) each; out may alias an input.
void residual_forward(float* out, const float* inp1, const float* inp2, int64_t N);
/// out = inp1 + inp2 with inp2 stored in `dt` (a half-precision branch output
/// added to the residual stream's f32 working values); out and inp1 f32, out
/// may alias inp1.
void residual_forward(float* out, const float* inp1, const void* inp2, DType dt, int64_t N);

/// dinp1 += dout; dinp2 += dout   (N) each. ACCUMULATES (+=): both inputs are
/// residual-stream tensors whose gradients collect several contributions. The
/// GPT model keeps a single residual-gradient buffer and so never calls this
/// (the add's backward is the identity); it exists for layouts that split the
/// stream and for the finite-difference tests.
void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t N);

/// out[i,c] += bias[c] for rows i in [0, N): the bias of a row-parallel linear,
/// added once after its partial products are summed. out (N, C), bias (C).
void bias_forward(float* out, const float* bias, int64_t N, int64_t C);

/// Inverted dropout with a counter-based mask (no mask is stored; backward
/// regenerates it): out[i,c] = in[i,c] * keep / (1 - p) where keep =
/// rand_uniform(seed, stream, (row0 + i) * C + c) >= p. Keying by the global
/// element index makes a rank's mask the exact slice of the single-rank mask
/// for any sharding of rows, and identical across ranks holding the same rows.
///   out, in (n, C) (may alias); row0: global index of row 0; 0 <= p < 1.
/// The same call on a gradient is the backward.
void dropout(float* out, const float* in, int64_t n, int64_t C, int64_t row0, float p,
             uint64_t seed, uint64_t stream);

/// dst[0, bytes) = 0, in pieces spread over the OpenMP team: one
/// thread's memset reaches about half of what two cores write (a gradient
/// buffer of 124M floats: 57 ms on one core, 35 ms on two).
void fill_zero(void* dst, size_t bytes);

}  // namespace braid::kernels
