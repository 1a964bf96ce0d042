// All-to-all attention for context parallelism (Jacobs et al. 2023,
// "DeepSpeed Ulysses"; Megatron-Core's cp_comm_type a2a): an all-to-all over
// the CP group turns the sequence split into a head split, each rank attends
// its NH / CP heads over whole sequences with the fused kernel, and a second
// all-to-all turns the output back into the sequence split. Backward mirrors
// it (dO and O in, dq, dk, dv out). The tokens each rank holds are those of
// chunk_layout (Megatron's load-balanced chunks), so the gathered sequence is
// put back in position order before the kernel runs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/parallel/context/ring_attention.h"

namespace braid::comm {
class Communicator;
}

namespace braid::parallel::context {

/// Floats of workspace ulysses_attention_forward / _backward need for the shape
/// of ring_attention (s.NH and its key/value heads must divide by the group size).
size_t ulysses_attention_scratch_floats(const RingShape& s, int cp);

/// As ring_attention_forward, by all-to-all: saves qkvr as q (B, NH / CP,
/// T_seq, hs), then k and v (B, NKV / CP, T_seq, hs), and lse as (B, NH / CP,
/// T_seq): this rank's heads over whole sequences (the same sizes as the
/// ring's). Throws braid::ConfigError when CP does not divide NH and NKV.
void ulysses_attention_forward(comm::Communicator& cp, float* out, void* qkvr, float* lse, float* scratch,
                               const void* qkv, const RingShape& s);

/// Backward: dqkv (B, T, qkv_width) f32 (=) from dout (B, T, C) f32, out (B, T, C in
/// `store`, the forward's output as kept) and what forward saved.
void ulysses_attention_backward(comm::Communicator& cp, float* dqkv, float* scratch, const float* dout,
                                const void* out, const void* qkvr, const float* lse, const RingShape& s);

}  // namespace braid::parallel::context
