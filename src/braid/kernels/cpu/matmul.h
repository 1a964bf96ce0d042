// The one matrix multiply (every kernel calls it) and the linear-layer kernel pair
// built on it. Every matmul in braid's CPU path goes through kernels::gemm, which
// is backed by oneDNN's matmul primitive; no kernel calls a BLAS directly.
#pragma once
#include <cstddef>
#include <cstdint>

namespace braid::kernels {

/// Batched, dense, row-major fp32 GEMM:
///   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] (+ bias, broadcast over rows)
/// for b in [0, batch), where op(X) = X^T when the trans flag is set.
///   A: (batch, M, K), or (batch, K, M) when trans_a   (contiguous)
///   B: (batch, K, N), or (batch, N, K) when trans_b   (contiguous)
///   C: (batch, M, N)                                   (contiguous)
///   bias: (N) or nullptr; only with alpha == 1 (oneDNN scales the bias too).
/// beta == 0 never reads C (so C may hold garbage/NaN); beta == 1 accumulates.
/// oneDNN primitives are created once per distinct (shape, flags, alpha, beta,
/// bias) and cached in a thread_local table, so ranks running as threads do not
/// share state and the step loop allocates nothing after the first step.
/// Runs with omp_get_max_threads() threads (1 inside an OpenMP parallel region).
/// Throws braid::Error on a negative size or a oneDNN failure.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, const float* B, float beta, float* C, const float* bias = nullptr,
          int64_t batch = 1);

/// Number of oneDNN matmul primitives cached by the calling thread (for tests).
size_t gemm_cache_size();

/// Linear layer as torch.nn.Linear: out = inp @ weight^T + bias.
///   out    (BT, OC)  written
///   inp    (BT, C)
///   weight (OC, C)   stored (out, in) like nn.Linear
///   bias   (OC) or nullptr
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC);

/// Backward of matmul_forward.
///   dinp    (BT, C)   written (=); may be nullptr to skip
///   dweight (OC, C)   accumulated (+=); may be nullptr to skip (zero-bubble B pass)
///   dbias   (OC)      accumulated (+=); nullptr when the layer has no bias
///   dout    (BT, OC)
///   inp     (BT, C)
///   weight  (OC, C)   (unused when dinp is nullptr)
/// dbias is a column sum in a fixed order (deterministic, independent of threads).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC);

}  // namespace braid::kernels
