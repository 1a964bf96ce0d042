// The flat parameter layout of a model on one rank: which tensors a
// pipeline stage holds, their local shapes on a TP rank, their offsets (each
// aligned to 16 floats) and the FSDP units they form (unit_storage.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/model/config.h"

namespace braid::model {

/// One tensor of the flat parameter buffer (this TP rank's part of it).
struct ParamInfo {
  std::string name;            // GPT-2-style name, e.g. "h.3.attn.c_attn.weight" (param_layout.cpp lists them)
  std::vector<int64_t> shape;  // local shape; weights (out, in) as nn.Linear (HF Conv1D stores the transpose)
  std::vector<int64_t> full_shape;  // shape of the whole tensor (TP = 1)
  int tp_dim = -1;             // -1 replicated over TP; 0 rows split; 1 columns split
  /// Rows split inside each of these row blocks (full rows of each, in order;
  /// empty: one block): c_attn's q, k, v (unequal under grouped-query
  /// attention), SwiGLU's gate and up.
  std::vector<int64_t> tp_block_rows;
  size_t offset;               // first element in params()/grads(); multiple of 16
  size_t numel;                // product of shape
  bool weight_decay;           // true for 2-D matrices (incl. wte, wpe), false for biases/LN
  int layer;                   // -1 embeddings, 0..L-1 blocks, L final LayerNorm
  size_t global_index = 0;     // index in the whole model's table (keys the initialisation)
};

/// A block's tensors by role; a block of cfg holds those its parts use, in
/// this order (block_roles).
enum class BlockRole : uint8_t {
  ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, count
};
/// The roles a block of cfg holds, in table order: LayerNorm has a bias,
/// RMSNorm none; the linears' biases follow cfg.bias.
std::vector<BlockRole> block_roles(const GPTConfig& cfg);

/// Builds the parameter table for cfg on a rank of a TP group of tp (the
/// tensors `stage` holds); layer_begin gets each held block's first element,
/// then the final LayerNorm's (when held) and the end. Returns num_params
/// (elements, including alignment gaps).
size_t build_param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage, std::vector<ParamInfo>* table,
                         std::vector<size_t>* layer_begin);
/// Unit boundaries of cfg's flat layout on a TP rank: L + 3 offsets
/// (elements), unit u is [b[u], b[u+1]). See UnitStorage for the numbering.
/// With a pipeline `stage`: the units that stage holds, in its own flat layout.
std::vector<size_t> unit_bounds(const GPTConfig& cfg, int tp = 1, const PipelineStage& stage = {});
/// The parameter table of cfg (local shapes on a rank of a TP group of tp).
std::vector<ParamInfo> param_table(const GPTConfig& cfg, int tp = 1, const PipelineStage& stage = {});
/// Throws ConfigError naming the fix when tp does not divide n_head,
/// n_kv_head, the MLP's hidden features or padded_vocab_size.
void validate_tp(const GPTConfig& cfg, int tp);
/// Index in the whole (TP = 1) tensor of element `local` of p on TP rank tp_rank of tp.
size_t full_index(const ParamInfo& p, size_t local, int tp_rank, int tp);

}  // namespace braid::model
