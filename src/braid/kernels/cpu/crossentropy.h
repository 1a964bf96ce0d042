// Fused softmax + cross-entropy over a vocabulary padded from V to Vp columns.
// Columns >= V are excluded: they get no probability mass and zero gradient.
// Each function also has an overload whose logits are stored in a DType `dt`
// (f32, bf16 or f16: half-precision logits are widened exactly and every sum
// runs in f32), taking (const void* logits, DType dt) where the f32 one takes
// const float* logits; such an in-place backward is not possible (dlogits f32).
#pragma once
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// Per-row loss_i = logsumexp(logits_i[0:V]) - logits_i[target_i].
///   losses (N)       written (per row; the caller takes the mean)
///   lse    (N)       saved for backward: logsumexp over [0, V)
///   probs  (N, Vp)   optional (nullptr skips): softmax over [0, V), 0 at >= V
///   logits (N, Vp); targets (N) int32 in [0, V), or nullptr (then losses is
///   not written; lse still is)
/// N = B*T rows. Throws braid::Error on a target outside [0, V).
void softmax_crossentropy_forward(float* losses, float* lse, float* probs, const float* logits,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
void softmax_crossentropy_forward(float* losses, float* lse, float* probs, const void* logits, DType dt,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp);

/// dlogits = dloss * (softmax(logits) - onehot(target)) over [0, V), 0 at >= V.
///   dlogits (N, Vp)  written (=); may alias logits (in place)
///   logits (N, Vp); lse (N) from forward; targets (N)
///   dloss: gradient of the objective w.r.t. each row's loss, the same for all
///   rows (for a mean loss scaled by s: dloss = s / N).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp);
void softmax_crossentropy_backward(float* dlogits, const void* logits, DType dt, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V, int64_t Vp);

// ---- vocab-parallel cross-entropy (Megatron-LM, Shoeybi et al. 2019, sec. 3):
// each rank holds the logits of its vocabulary columns [start, start + Vl);
// the full logits are never gathered. Per row: max over ranks (all-reduce max),
// then sum of exp and the target's logit (all-reduce sum), then the loss.

/// rowmax[i] = max over this rank's valid columns [0, Vl) of logits[i,:]
/// (-inf when Vl = 0). logits (N, Vpl); Vl <= Vpl valid columns.
void vocab_parallel_max(float* rowmax, const float* logits, int64_t N, int64_t Vl, int64_t Vpl);
void vocab_parallel_max(float* rowmax, const void* logits, DType dt, int64_t N, int64_t Vl, int64_t Vpl);
/// sums[i] = sum_j exp(logits[i,j] - rowmax[i]) over valid columns and
/// target_logit[i] = logits[i, targets[i] - start] if the target is in this
/// rank's columns, else 0. targets may be nullptr (target_logit untouched).
void vocab_parallel_sumexp(float* sums, float* target_logit, const float* logits,
                           const float* rowmax, const int32_t* targets, int64_t start,
                           int64_t N, int64_t Vl, int64_t Vpl);
void vocab_parallel_sumexp(float* sums, float* target_logit, const void* logits, DType dt, const float* rowmax,
                           const int32_t* targets, int64_t start, int64_t N, int64_t Vl, int64_t Vpl);
/// dlogits = dloss * (exp(logits - lse) - onehot(target - start)) over valid
/// columns, 0 on padding columns. dlogits may alias logits.
void vocab_parallel_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                          const int32_t* targets, int64_t start, float dloss,
                                          int64_t N, int64_t Vl, int64_t Vpl);
void vocab_parallel_crossentropy_backward(float* dlogits, const void* logits, DType dt, const float* lse,
                                          const int32_t* targets, int64_t start, float dloss, int64_t N,
                                          int64_t Vl, int64_t Vpl);

}  // namespace braid::kernels
