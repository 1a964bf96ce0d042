// The one matrix multiply (every kernel calls it) and the linear-layer kernel pair
// built on it. Every matmul in braid's CPU path goes through kernels::gemm, which
// is backed by oneDNN's matmul primitive; no kernel calls a BLAS directly.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

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

/// gemm with A and B in `ab_type` (f32, bf16 or f16; products exact in f32)
/// and C, bias in f32: C = alpha * op(A) @ op(B) + beta * C (+ bias),
/// accumulated in f32 (oneDNN's bf16 x bf16 -> f32 matmul: AVX512-BF16 dot
/// products, AMX tiles where the CPU has them). Where oneDNN has no matmul for
/// `ab_type` on this CPU (half_matmul_supported: f16 with oneDNN 2.6 on CPUs
/// without AVX512-FP16 kernels) the operands are widened exactly to f32, in
/// tiles of at most 2^22 elements of each operand held by the calling thread
/// (16 MiB each), and multiplied in f32: the same products, summed in f32 (over
/// K in tiles when an operand's K side does not fit one). Shapes and flags as
/// gemm. Throws braid::Error on a negative size or a oneDNN failure.
void gemm_typed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, const void* B, DType ab_type, float beta, float* C,
                const float* bias = nullptr, int64_t batch = 1);

/// True when oneDNN builds a `t` x `t` -> f32 matmul on this CPU (f32: always).
bool half_matmul_supported(DType t);

/// Number of oneDNN matmul primitives cached by the calling thread (for tests).
size_t gemm_cache_size();

/// dst (cols, rows) = src (rows, cols)^T, row-major f32, in 32 x 32 tiles
/// spread over the OpenMP team. dst and src must not overlap.
void transpose(float* dst, const float* src, int64_t rows, int64_t cols);

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
///
/// With `scratch` of at least matmul_backward_scratch_floats(BT, C, OC) floats
/// the products run in oneDNN's fast layout: the backend multiplies a plain
/// right operand of many columns at 55-65 % of its rate with a transposed one
/// (docs/BENCHMARKS.md, "Backward matmul layouts"). A layer with a side of
/// >= 2048 (wide) computes dinp with a transposed copy of the weight (in blocks
/// of at most 4096 of its OC rows, accumulated in block order) when BT >= 1024,
/// and below as dinp^T = weight^T dout^T into scratch, transposed back: always
/// from BT = 512, below only when C >= 2048 or OC >= 8192. dweight, when
/// C >= 2048, multiplies by a transposed copy of inp. Without scratch (nullptr),
/// or when no side is wide, the operands are used as stored.
/// Which layout runs depends only on the sizes and on whether scratch is given,
/// so every rank of a layout rounds alike.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC,
                     float* scratch = nullptr);

/// matmul_forward with inp and weight stored in `ab` (f32, bf16 or f16; shapes
/// as matmul_forward): oneDNN multiplies the half-precision operands exactly
/// (or widened to f32 where it has no `ab` matmul) and accumulates in f32
/// (gemm_typed); out and bias are f32. ab = f32 is matmul_forward itself.
void matmul_forward_typed(float* out, const void* inp, const void* weight, DType ab, const float* bias,
                          int64_t BT, int64_t C, int64_t OC);

/// matmul_backward with dout, inp and weight stored in `ab`: dinp (=), dweight
/// (+=) and dbias (+=, the column sum of dout widened, in row order) stay f32.
/// ab = f32 is matmul_backward itself (with `scratch`); in bf16 / f16 the
/// operands are used as stored (oneDNN's half-precision kernels read a plain
/// right operand at full rate: docs/BENCHMARKS.md) and scratch is unused.
void matmul_backward_typed(float* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                           const void* weight, DType ab, int64_t BT, int64_t C, int64_t OC,
                           float* scratch = nullptr);

/// Floats of scratch matmul_backward uses for (BT, C, OC), by the rules above:
/// min(OC, 4096) x C when the weight's copy runs, BT x C when dinp is computed
/// transposed or C >= 2048 (inp's copy), the larger when both apply, else 0.
size_t matmul_backward_scratch_floats(int64_t BT, int64_t C, int64_t OC);

}  // namespace braid::kernels
