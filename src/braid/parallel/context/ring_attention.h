// Context parallelism's sequence layout and ring attention (Liu et al. 2023,
// "Ring Attention with Blockwise Transformers"; the causal load balance of
// Megatron-Core's context parallelism): the T_seq tokens of each sequence are
// cut into 2 CP chunks of c = T_seq / (2 CP) tokens, and rank r of the CP group
// holds chunks r and 2 CP - 1 - r, in that order (so every rank has the same
// causal work). Ring attention keeps the rank's queries and passes the key /
// value blocks round the group by point-to-point messages, each rank folding
// every block it holds into the running softmax state of its queries
// (kernels/cpu/flash_attention.h: the log-sum-exp merge) while the next block
// is in flight. Pairs of chunks wholly above the diagonal cost nothing (the
// block functions skip masked tiles). Backward passes each block's key / value
// gradients along with it, so they arrive back at their owner after a full turn.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/model/operators.h"

namespace braid::comm {
class Communicator;
}

namespace braid::parallel::context {

/// The tokens of each sequence CP rank `rank` holds: spans {r c, c} and
/// {(2 CP - 1 - r) c, c}, c = T_seq / (2 CP); one span {0, T_seq} at CP = 1.
/// Throws braid::ConfigError when 2 CP does not divide T_seq.
model::SequenceLayout chunk_layout(int64_t T_seq, int cp, int rank);

/// Keeps this rank's tokens of each of B sequences of layout.T_seq ids, in
/// place: x (B, T_seq) int32 becomes (B, T) with the layout's spans in order.
void keep_local_tokens(int32_t* x, int64_t B, const model::SequenceLayout& layout);

/// One ring-attention call: B sequences, this rank's T tokens of each (the
/// layout's spans, in order), NH query heads of C / NH features sharing NKV
/// key/value heads (grouped-query attention; 0: NH), operands stored in
/// `store`, products' inputs rounded to `round`.
struct RingShape {
  int64_t B, T, C, NH;
  DType store = DType::f32, round = DType::f32;
  int64_t T_seq = 0;  // tokens of a whole sequence (T x CP)
  int64_t NKV = 0;
  int64_t kv_heads() const { return NKV > 0 ? NKV : NH; }
  /// Features of a packed [q | k | v] row: C + 2 NKV C / NH.
  int64_t qkv_width() const { return C + 2 * kv_heads() * (C / NH); }
};

/// Floats of workspace ring_attention_forward / _backward need (the larger):
/// forward's running state (o, m, l) and two blocks in flight; backward's dO
/// (f32 and stored), D, dq, this rank's own dk, dv and two travelling blocks
/// with their gradients.
size_t ring_attention_scratch_floats(const RingShape& s);

/// out (B, T, C) f32 = causal attention of this rank's queries against every
/// key of their sequences at or before them, over the CP group `cp` (every
/// rank calls it together). qkv (B, T, qkv_width) packed in `store`; saves
/// qkvr head-major in `store` (q (B, NH, T, hs), then k and v (B, NKV, T, hs):
/// kernels::permute_qkv) and lse (B, NH, T) f32. Only the key/value heads
/// travel round the ring.
void ring_attention_forward(comm::Communicator& cp, float* out, void* qkvr, float* lse, float* scratch,
                            const void* qkv, const RingShape& s);

/// Backward: dqkv (B, T, qkv_width) f32 (=) of this rank's tokens from dout (B, T, C)
/// f32, out (the forward's output as kept, in `store`), qkvr and lse.
void ring_attention_backward(comm::Communicator& cp, float* dqkv, float* scratch, const float* dout, const void* out,
                             const void* qkvr, const float* lse, const RingShape& s);

}  // namespace braid::parallel::context
