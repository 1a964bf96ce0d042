// What a GPT model allocates on one rank, computed without allocating: the
// constructor carves its buffers from exactly this plan, so `braid plan` and
// the memory ledger agree by construction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "braid/core/dtype.h"
#include "braid/core/memory.h"
#include "braid/model/config.h"

namespace braid::model {

/// What GPT(cfg, max_B, max_T) allocates, computed without allocating
/// (memory_plan). The constructor allocates exactly these buffers, so the
/// plan and the MemoryLedger agree by construction. Sizes in bytes unless named
/// *_floats / num_params (elements).
struct GPTMemoryPlan {
  size_t num_params = 0;        // elements of the flat parameter buffer (incl. alignment gaps)
  size_t layer_act_floats = 0;  // activation floats one transformer block keeps (per slot)
  size_t shared_act_floats = 0; // recomputation workspace shared by all blocks (activations)
  size_t act_floats = 0;        // floats of the activation buffer (all blocks + head)
  size_t scratch_floats = 0;    // floats of the backward scratch buffer
  size_t matmul_scratch_floats = 0;  // of which the linear layers' transposed copies
  size_t params_bytes = 0;      // compute_params: num_params f32
  size_t grads_bytes = 0;       // grads: num_params f32
  size_t acts_bytes = 0;        // activations: act_floats f32
  size_t tokens_bytes = 0;      // activations: (max_B, max_T) x 2 int32 (tokens, targets)
  size_t workspace_bytes = 0;   // workspace: scratch_floats f32

  /// Bytes of category c (0 for categories GPT does not allocate).
  size_t bytes(MemCategory c) const;
  /// Sum over all categories, in bytes.
  size_t total_bytes() const;
};

/// Floats of storage for n matmul-operand elements of dtype `operands` (f32:
/// n; bf16 / fp16: n / 2, rounded up).
inline size_t operand_floats(size_t n, DType operands) { return operands == DType::f32 ? n : (n + 1) / 2; }

/// Elements of the buffer that holds a block's matmul output gradient in the
/// half-precision operand dtype: the largest of c_fc's (BT x Fl: the
/// up-projection's local rows), c_attn's (BT x QKVl) and the residual
/// stream's (rows x C). (The head's goes over its logits, which backward no
/// longer needs.)
size_t half_grad_elems(size_t BT, size_t rows, size_t C, size_t QKVl, size_t Fl);

/// Whether a model of cfg runs the fused attention kernel, given what the
/// operators chose (Operators::fused_attention): grouped-query attention
/// always does (the kernel that saves the probabilities has no kv groups).
inline bool plans_fused_attention(const GPTConfig& cfg, bool operators_choice) {
  return operators_choice || cfg.kv_heads() != cfg.n_head;
}

/// The buffers GPT(cfg, max_B, max_T, ...) allocates, in bytes per category,
/// computed without allocating them (cheap even for gpt2). owns_state=false:
/// a model built with external UnitStorage (no parameter or gradient
/// buffers). precision: with half-precision operands the matmul inputs kept for
/// backward take 2 bytes an element, and a buffer holds each matmul's output
/// gradient in that dtype. Throws ConfigError in the same cases as the constructor: an
/// invalid config, max_T > block_size, tp not dividing n_head or the padded
/// vocabulary, sequence parallelism with tp not dividing max_B * max_T, or a
/// stage whose chunks are not increasing non-empty layer ranges.
/// attention_scratch: floats of workspace the operators' attention needs
/// beyond the fused kernel's (Operators::attention_scratch_floats; 0: none).
/// fused_attention: the model runs the fused kernel (Operators::fused_attention),
/// else the one that saves the probabilities (B x heads x T x T); unset: the
/// plain operators' rule, max_T >= kernels::kFusedAttentionMinT.
GPTMemoryPlan memory_plan(const GPTConfig& cfg, int64_t max_B, int64_t max_T, bool owns_state = true, int tp = 1,
                          bool sequence_parallel = false, float dropout = 0.0f, const PipelineStage& stage = {},
                          Recompute recompute = Recompute::none, const Precision& precision = {},
                          size_t attention_scratch = 0, std::optional<bool> fused_attention = std::nullopt);

}  // namespace braid::model
