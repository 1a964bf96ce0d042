// Causal multi-head self-attention (Vaswani et al. 2017, eq. 1) from packed qkv:
//   Y_h = softmax(Q_h K_h^T / sqrt(hs) + M) V_h,  M_ij = -inf for j > i
// for heads h = 0..NH-1, hs = C / NH. All products go through kernels::gemm,
// batched over the B*NH (batch, head) pairs.
#pragma once
#include <cstddef>
#include <cstdint>

namespace braid::kernels {

/// Floats of workspace attention_forward needs: B*T*C.
size_t attention_forward_scratch_floats(int64_t B, int64_t T, int64_t C);
/// Floats of workspace attention_backward needs: B*NH*T*T + 4*B*T*C.
size_t attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH);

///   out     (B, T, C)         written; heads concatenated along C
///   qkvr    (3, B, NH, T, hs) saved: q, k, v rearranged head-major
///   att     (B, NH, T, T)     saved: softmax probabilities, 0 above the diagonal
///   scratch attention_forward_scratch_floats(B, T, C) floats
///   qkv     (B, T, 3C)        packed [q | k | v] along the last dim (c_attn output)
/// Throws braid::Error if C % NH != 0.
void attention_forward(float* out, float* qkvr, float* att, float* scratch, const float* qkv,
                       int64_t B, int64_t T, int64_t C, int64_t NH);

/// Backward of attention_forward (P = att, S = scaled scores):
///   dV = P^T dY, dP = dY V^T, dS = P * (dP - rowsum(dP * P)),
///   dQ = dS K / sqrt(hs), dK = dS^T Q / sqrt(hs).
///   dqkv    (B, T, 3C)  written (=)
///   scratch attention_backward_scratch_floats(B, T, C, NH) floats
///   dout    (B, T, C); qkvr, att from forward
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkvr,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace braid::kernels
