// AdamW with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2, with
// schedule multiplier eta_t folded into lr), as torch.optim.AdamW.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// One update of n elements at step t (1-based):
///   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
///   p = p - lr * weight_decay * p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
///   params (n) updated; grads (n); m, v (n) optimizer state, updated.
/// Pass weight_decay = 0 for segments that are not decayed (biases, LayerNorm).
/// The arithmetic follows torch's single-tensor AdamW (decay first, then the
/// bias-corrected step) so results agree to rounding. Throws on t < 1.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t);

/// adamw_update with gradients of any dtype, each multiplied by grad_mult in
/// f32 before use (g = f32(grads[i]) * grad_mult): unscaling by 1/loss_scale
/// and the clipping coefficient in one pass. grads (n, gdt). With gdt = f32 and
/// grad_mult = 1 the result is bitwise adamw_update's.
/// With `bf16_out` (n, bf16) the updated parameters are also written there,
/// rounded to nearest even (f32_to_bf16): a half-precision run's compute copy
/// without a second pass over the master weights.
void adamw_update_mixed(float* params, const void* grads, DType gdt, float grad_mult, float* m,
                        float* v, size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t, uint16_t* bf16_out = nullptr);

/// Sum of squares of len gradients of dtype t, each times mult, in double: the
/// global norm's per-rank part. Blocks of 16384 elements are summed in vector
/// lanes and added in block order, so the value is the same for any number of
/// threads (bitwise, for a given build).
double grad_sumsq(const void* g, DType t, size_t len, float mult);

}  // namespace braid::kernels
