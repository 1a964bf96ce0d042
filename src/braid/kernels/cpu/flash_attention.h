// Fused causal attention in O(T) memory: the FlashAttention-2 algorithm (Dao
// 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", Algorithms 1 and 2) on CPU tiles. Queries are taken in tiles
// of kQueryTile rows against keys in tiles of kKeyTile; each tile's scores
// S = q k^T / sqrt(hs) live only in the calling thread's tile buffers, and the
// softmax is kept online per query row as a running maximum m, sum l and
// unnormalised output o:
//   m' = max(m, rowmax S),  P = exp(S - m'),  l' = l e^(m - m') + rowsum P,
//   o' = o e^(m - m') + P v,
// so forward saves only the output and the per-row log-sum-exp m + log l.
// Backward recomputes P = exp(S - lse) tile by tile and uses
// D = rowsum(dO * O) in place of rowsum(dP * P) (FlashAttention-2, eq. in
// Section 3.1.2). The tile products go through kernels::gemm_typed (oneDNN:
// bf16 operands multiply on the CPU's bf16 units), one thread per tile job.
//
// The block functions take one head's queries and keys at given global
// positions, masked causally by position, so a context-parallel ring can feed
// them the key/value blocks of other ranks and merge by the same online state.
// Every result depends only on the shapes and positions, never on the thread
// count (each query row, and in backward each head, is one thread's serial work).
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// The shortest sequence (the model's longest micro-batch) from which a model
/// runs this kernel: below it, the kernel that saves the probabilities
/// (kernels/cpu/attention.h) was faster, its batched products over every head
/// beating one product per tile (docs/BENCHMARKS.md, "Attention and long
/// sequences": 0.89-0.93x at T = 256, 1.05-1.21x at 512), and its T x T memory is small.
inline constexpr int64_t kFusedAttentionMinT = 512;

/// Query rows and key columns of one tile: forward takes 64 query rows, backward
/// 128 (its five products per tile pair run fewer, larger calls), both 256 keys;
/// measured on T = 256 .. 4,096 with 64 features per head (docs/BENCHMARKS.md).
inline constexpr int64_t kQueryTile = 64;
inline constexpr int64_t kBackwardQueryTile = 128;
inline constexpr int64_t kKeyTile = 256;

/// Running softmax state of Tq query rows of one head (flash_forward_block):
///   o (Tq, hs) f32, unnormalised; m, l (Tq) f32. flash_state_init sets
///   o = 0, m = -inf, l = 0.
struct FlashState {
  float* o;
  float* m;
  float* l;
};
void flash_state_init(const FlashState& st, int64_t Tq, int64_t hs);

/// One head: queries q (Tq, hs) at global positions q_pos .. q_pos + Tq - 1
/// attend keys k and values v (Tk, hs each) at positions k_pos .. k_pos + Tk - 1,
/// key j visible to query i when k_pos + j <= q_pos + i; folds them into `st`.
/// q, k, v are stored in `store` (f32, or `round` itself); the probabilities
/// are rounded to `round` before they multiply v. Rows with no visible key in
/// this block are left as they were. Serial (call it from one thread); uses the
/// calling thread's tile buffers.
void flash_forward_block(const FlashState& st, const void* q, const void* k, const void* v, DType store,
                         DType round, int64_t Tq, int64_t Tk, int64_t hs, int64_t q_pos, int64_t k_pos);

/// Ends forward for Tq rows: out row i (hs f32, rows `ld_out` apart) = o_i / l_i
/// and lse_i = m_i + log l_i (f32). Throws braid::Error if a row saw no key.
void flash_state_finish(float* out, int64_t ld_out, float* lse, const FlashState& st, int64_t Tq, int64_t hs);

/// One head's backward for the pair of blocks of flash_forward_block:
///   P = exp(q k^T / sqrt(hs) - lse) (masked by position, rounded to `round`),
///   dv += P^T dO,  dS = P * (dO v^T - D),  dq += dS k / sqrt(hs),
///   dk += dS^T q / sqrt(hs),
/// with dS rounded to `round` before it multiplies. dO (Tq, hs) in `store`
/// (already rounded), lse and D = rowsum(dO * O) (Tq each, f32); dq (Tq, hs),
/// dk and dv (Tk, hs) f32, accumulated (+=). Serial.
void flash_backward_block(float* dq, float* dk, float* dv, const void* q, const void* k, const void* v,
                          const void* dO, const float* lse, const float* D, DType store, DType round, int64_t Tq,
                          int64_t Tk, int64_t hs, int64_t q_pos, int64_t k_pos);

/// The heads of grouped-query attention (Ainslie et al. 2023, "GQA"): NH
/// query heads of hs features share NKV key/value heads, query head h reading
/// key/value head h / (NH / NKV) in place (no copies). NKV == NH is multi-head
/// attention. A packed row is [q (NH hs) | k (NKV hs) | v (NKV hs)].
struct AttentionHeads {
  int64_t NH, NKV, hs;
  int64_t q_width() const { return NH * hs; }
  int64_t kv_width() const { return NKV * hs; }
  int64_t qkv_width() const { return (NH + 2 * NKV) * hs; }
};
/// Multi-head attention over C features in NH heads.
inline AttentionHeads mha_heads(int64_t C, int64_t NH) { return {NH, NH, NH > 0 ? C / NH : 0}; }

/// Copies between token-major packed rows (B, T, (NH + 2 NKV) hs) and the
/// head-major parts q (B, NH, T, hs), then k and v (B, NKV, T, hs) each, of
/// elements of `esz` bytes (to_heads: token-major -> head-major).
void permute_qkv(void* dst, const void* src, size_t esz, int64_t B, int64_t T, const AttentionHeads& a,
                 bool to_heads);

/// Floats of workspace flash_attention_backward needs: dO head-major in f32
/// and in `store`, D, and dq, dk, dv head-major:
/// (2 + half) B T NH hs + 2 B T NKV hs + B NH T. Forward needs none.
size_t flash_attention_backward_scratch_floats(int64_t B, int64_t T, const AttentionHeads& a,
                                               DType store = DType::f32);
inline size_t flash_attention_backward_scratch_floats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                                      DType store = DType::f32) {
  return flash_attention_backward_scratch_floats(B, T, mha_heads(C, NH), store);
}
/// Floats flash_attention_forward saves besides q, k, v: the log-sum-exp, B NH T.
size_t flash_attention_lse_floats(int64_t B, int64_t T, int64_t NH);

/// D (B, NH, T) f32 = rowsum over each head's features of dout * out, for
/// backward: dout (B, T, C) f32, out (B, T, C) in `store` widened exactly.
void flash_attention_output_dot(float* D, const float* dout, const void* out, DType store, int64_t B, int64_t T,
                                int64_t C, int64_t NH);

/// Causal self-attention over whole sequences (the result of
/// kernels::attention_forward, in O(B T C) memory), with grouped key/value heads:
///   out  (B, T, NH hs) f32            written; heads concatenated
///   qkvr q (B, NH, T, hs), then k and v (B, NKV, T, hs) each: saved, in `store`
///   lse  (B, NH, T) f32               saved: log-sum-exp of each query row's scores
///   qkv  (B, T, (NH + 2 NKV) hs)      packed [q | k | v], in `store`
/// Tile jobs (sequence, query head, query tile) spread over the OpenMP team.
/// Throws braid::Error unless NKV > 0 divides NH, or if store is neither f32
/// nor round.
void flash_attention_forward(float* out, void* qkvr, float* lse, const void* qkv, DType store, int64_t B,
                             int64_t T, const AttentionHeads& a, DType round = DType::f32);
/// Multi-head attention: qkv (B, T, 3C), NH heads of C / NH features. Throws
/// braid::Error if C % NH != 0.
void flash_attention_forward(float* out, void* qkvr, float* lse, const void* qkv, DType store, int64_t B, int64_t T,
                             int64_t C, int64_t NH, DType round = DType::f32);

/// Backward of flash_attention_forward:
///   dqkv (B, T, (NH + 2 NKV) hs) f32 written (=); dout (B, T, NH hs) f32; out:
///   the forward's output as the caller kept it, in `store` (for D); qkvr, lse
///   from forward; scratch of flash_attention_backward_scratch_floats floats.
/// Each (sequence, key/value head) is one thread's serial work, summing the
/// dk and dv of its group's query heads in head order (deterministic).
void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const void* out, const void* qkvr,
                              const float* lse, DType store, int64_t B, int64_t T, const AttentionHeads& a,
                              DType round = DType::f32);
/// Multi-head attention: dqkv (B, T, 3C). Throws braid::Error if C % NH != 0.
void flash_attention_backward(float* dqkv, float* scratch, const float* dout, const void* out, const void* qkvr,
                              const float* lse, DType store, int64_t B, int64_t T, int64_t C, int64_t NH,
                              DType round = DType::f32);

}  // namespace braid::kernels
