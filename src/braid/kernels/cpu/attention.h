// Causal multi-head self-attention (Vaswani et al. 2017, eq. 1) from packed qkv:
//   Y_h = softmax(Q_h K_h^T / sqrt(hs) + M) V_h,  M_ij = -inf for j > i
// for heads h = 0..NH-1, hs = C / NH. All products go through kernels::gemm
// (gemm_typed for half-precision storage), batched over the B*NH (batch, head) pairs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// Floats of workspace attention_forward needs: B*T*C, plus B*NH*T*T (the f32
/// scores) when `store` is a half-precision dtype.
size_t attention_forward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                        DType store = DType::f32);
/// Floats of workspace attention_backward needs: B*NH*T*T + 4*B*T*C, plus
/// half of B*NH*T*T and of B*T*C (each rounded up) when `store` is a
/// half-precision dtype.
size_t attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                         DType store = DType::f32);

///   out     (B, T, C)         written; heads concatenated along C
///   qkvr    (3, B, NH, T, hs) saved: q, k, v rearranged head-major
///   att     (B, NH, T, T)     saved: softmax probabilities, 0 above the diagonal
///   scratch attention_forward_scratch_floats(B, T, C) floats
///   qkv     (B, T, 3C)        packed [q | k | v] along the last dim (c_attn output)
/// Throws braid::Error if C % NH != 0.
void attention_forward(float* out, float* qkvr, float* att, float* scratch, const float* qkv,
                       int64_t B, int64_t T, int64_t C, int64_t NH);

/// attention_forward with qkv, qkvr and att stored in `store` and the stored
/// probabilities rounded to `round` (store is f32, or round itself: f32
/// storage with round = bf16 / f16 holds the same values as half storage, for
/// running a half-precision model's arithmetic in f32). The products multiply
/// the stored values and accumulate in f32 (gemm_typed); the softmax runs in
/// f32 on the unrounded scores; y = att @ v uses the rounded att. out f32.
/// scratch: attention_forward_scratch_floats(B, T, C, NH, store) floats.
/// Throws braid::Error if C % NH != 0 or store is neither f32 nor round.
void attention_forward(float* out, void* qkvr, void* att, float* scratch, const void* qkv, DType store,
                       int64_t B, int64_t T, int64_t C, int64_t NH, DType round = DType::f32);

/// Backward of attention_forward (P = att, S = scaled scores):
///   dV = P^T dY, dP = dY V^T, dS = P * (dP - rowsum(dP * P)),
///   dQ = dS K / sqrt(hs), dK = dS^T Q / sqrt(hs).
///   dqkv    (B, T, 3C)  written (=)
///   scratch attention_backward_scratch_floats(B, T, C, NH) floats
///   dout    (B, T, C); qkvr, att from forward
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkvr,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);

/// attention_backward of the typed attention_forward: qkvr and att stored in
/// `store`; the products' output gradients (dY, dS) are rounded to `round`
/// before they multiply, as every matmul's output gradient in a
/// half-precision run. dqkv and dout f32. scratch:
/// attention_backward_scratch_floats(B, T, C, NH, store) floats.
void attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkvr, const void* att,
                        DType store, int64_t B, int64_t T, int64_t C, int64_t NH, DType round = DType::f32);

}  // namespace braid::kernels
