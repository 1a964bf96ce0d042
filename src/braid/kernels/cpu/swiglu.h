// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", eq. 5; Llama's MLP):
//   out = silu(gate) * up,  silu(a) = a * sigmoid(a)
// on a packed row [gate (H) | up (H)], the output of one fused linear C -> 2H.
// The sigmoid's exponential is vec_math.h's vexp (about 2 ulp), so the loops
// vectorise.
#pragma once
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

///   out (N, H) written; inp (N, 2H): each row's gate then up.
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t H);

/// Backward of swiglu_forward, written (=):
///   dgate = dout * up * silu'(gate),  silu'(a) = s (1 + a (1 - s)), s = sigmoid(a)
///   dup   = dout * silu(gate)
///   dinp (N, 2H) [dgate | dup]; dout (N, H); inp (N, 2H) from forward.
void swiglu_backward(float* dinp, const float* dout, const float* inp, int64_t N, int64_t H);

/// The same with inp stored in `dt` (f32, bf16 or f16), widened exactly in
/// chunks of each row (nothing allocated); out, dinp, dout f32.
void swiglu_forward(float* out, const void* inp, DType dt, int64_t N, int64_t H);
void swiglu_backward(float* dinp, const float* dout, const void* inp, DType dt, int64_t N, int64_t H);

}  // namespace braid::kernels
