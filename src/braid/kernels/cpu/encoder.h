// Token + position embedding (GPT-2 input layer).
#pragma once
#include <cstdint>

namespace braid::kernels {

/// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
///   out    (B, T, C)  written
///   tokens (B, T)     int32 ids in [0, V) (not checked here; the model checks)
///   wte    (V, C), wpe (>= T, C)
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C);

/// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
///   dwte (V, C), dwpe (>= T, C)  accumulated (+=)
///   dout (B, T, C)
/// Threads split the channels, so repeated tokens never race and the summation
/// order (b, t ascending) is fixed: deterministic for any thread count.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                      int64_t B, int64_t T, int64_t C);

}  // namespace braid::kernels
