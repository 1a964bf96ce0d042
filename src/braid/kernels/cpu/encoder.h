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

// ---- vocab-parallel pieces (Megatron-LM VocabParallelEmbedding) ----

/// out[i,:] = wte[tokens[i] - start,:] when start <= tokens[i] < start + rows,
/// else 0: this rank's part of the embedding, summed over the TP ranks.
///   out (N, C) written; tokens (N); wte (rows, C): the vocabulary rows
///   [start, start + rows) held by this rank.
void embedding_lookup_range(float* out, const int32_t* tokens, const float* wte, int64_t start,
                            int64_t rows, int64_t N, int64_t C);
/// dwte[tokens[i] - start,:] += dout[i,:] for tokens in this rank's rows;
/// deterministic like encoder_backward. dwte (rows, C) accumulated (+=).
void embedding_backward_range(float* dwte, const float* dout, const int32_t* tokens,
                              int64_t start, int64_t rows, int64_t N, int64_t C);
/// out[i,:] += wpe[(row0 + i) % T,:] for rows i in [0, n): the position
/// embedding of global token rows row0 .. row0+n-1 of a (B, T) batch.
void position_forward(float* out, const float* wpe, int64_t row0, int64_t n, int64_t T, int64_t C);
/// dwpe[(row0 + i) % T,:] += dout[i,:] (rows in ascending order: deterministic).
void position_backward(float* dwpe, const float* dout, int64_t row0, int64_t n, int64_t T, int64_t C);

}  // namespace braid::kernels
