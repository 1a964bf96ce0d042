// A decoder-only transformer's shape and how a rank holds it: the
// configuration (GPT-2 and Llama-family blocks are two settings of its block
// parts), the pipeline stage (which layers, how many activation slots) and the
// activation-recomputation mode.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "braid/core/dtype.h"

namespace braid::model {

/// The normalisation of a block's two branches and of the final norm:
/// LayerNorm (Ba et al. 2016; GPT-2, with a bias) or RMSNorm (Zhang &
/// Sennrich 2019; Llama, weight only).
enum class NormKind : uint8_t { layernorm, rmsnorm };
/// How positions enter: a learned table added to the embedding (GPT-2's wpe)
/// or rotary embeddings of q and k in every block (Su et al. 2021; Llama).
enum class PositionKind : uint8_t { learned, rope };
/// The MLP: GELU at `mlp_hidden` (GPT-2: 4C) or SwiGLU (Shazeer 2020; Llama),
/// whose up-projection is one packed [gate | up] matrix of 2 x mlp_hidden rows.
enum class MlpKind : uint8_t { gelu, swiglu };

/// Llama 3's rotary-frequency scaling (transformers' rope_type "llama3";
/// kernels/cpu/rope.h applies it): factor 1 is none.
struct RopeScalingConfig {
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

struct GPTConfig {
  std::string name;
  int64_t vocab_size = 50257;
  int64_t padded_vocab_size = 50304;  // vocab_size rounded up to a multiple of 64
  int64_t block_size = 1024;          // maximum sequence length T
  int64_t n_layer = 12, n_head = 12, n_embd = 768;
  // ---- the block's parts (GPT-2's by default) ----
  int64_t n_kv_head = 0;     // key/value heads (grouped-query attention); 0: n_head
  int64_t mlp_hidden = 0;    // the MLP's hidden features; 0: 4 n_embd
  NormKind norm = NormKind::layernorm;
  float norm_eps = 1e-5f;
  PositionKind positions = PositionKind::learned;
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  MlpKind mlp = MlpKind::gelu;
  bool bias = true;         // biases on the linear layers (the norms' follow `norm`)
  bool tied_head = true;    // the LM head is wte (else its own lm_head matrix)

  /// GPT-2: "tiny" (2 layers, 4 heads, n_embd 64, block 64), "small" (4/4/256,
  /// block 256), "gpt2" (12/12/768, block 1024, 124M parameters), all with the
  /// GPT-2 vocabulary (50257, padded to 50304). Llama-family blocks (RMSNorm,
  /// rotary positions, SwiGLU, grouped-query attention, no biases):
  /// "llama-tiny" (2/4/64, 2 kv heads, hidden 176, untied), "llama-small"
  /// (4/4/256, 2 kv heads, hidden 688, untied), both on the GPT-2 vocabulary;
  /// and the shapes of Meta's models (their config.json files, 128,256
  /// tokens): "llama3.2-1b" (16 layers, 32 heads, 8 kv, 2048 wide, hidden
  /// 8192, tied, RoPE theta 5e5 scaled by 32), "llama3.1-8b" (32/32/8/4096/
  /// 14336), "llama3.1-70b" (80/64/8/8192/28672), "llama3.1-405b"
  /// (126/128/8/16384/53248), untied, scaled by 8. Throws ConfigError listing the names.
  static GPTConfig preset(const std::string& name);
  /// Every preset's name, in the order preset() documents them.
  static const std::vector<std::string>& preset_names();
  /// Throws ConfigError naming the offending values and the fix when a size is
  /// non-positive, n_embd % n_head != 0, n_head % n_kv_head != 0, rotary
  /// positions with an odd head size, padded_vocab_size < vocab_size or
  /// padded_vocab_size % 64 != 0.
  void validate() const;

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_size() const { return n_embd / n_head; }
  /// Columns of the packed [q | k | v] projection: C + 2 kv_heads head_size.
  int64_t qkv_width() const { return n_embd + 2 * kv_heads() * head_size(); }
  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * n_embd; }
  /// Rows of the MLP's up-projection: hidden, or [gate | up] for SwiGLU.
  int64_t fc_width() const { return mlp == MlpKind::swiglu ? 2 * hidden() : hidden(); }
  /// True for GPT-2's block (every part the default).
  bool is_gpt2_block() const;
  /// "layernorm" / "rmsnorm", "learned" / "rope", "gelu" / "swiglu".
  static const char* norm_name(NormKind k);
  static const char* positions_name(PositionKind k);
  static const char* mlp_name(MlpKind k);
  /// The inverse of the *_name functions; throw ConfigError naming the choices.
  static NormKind parse_norm(const std::string& s);
  static PositionKind parse_positions(const std::string& s);
  static MlpKind parse_mlp(const std::string& s);
  /// v rounded up to a multiple of `multiple` (64 keeps the head GEMM aligned).
  static int64_t pad_vocab(int64_t v, int64_t multiple = 64);
  /// The name of this configuration when it was built from preset `base` with
  /// some sizes changed: `base` when none differs; its sizes ("L=105 H=128
  /// C=20480", then any other change) when layers, heads and width all differ;
  /// else the preset and what changed ("small with n_layer=8, block_size=512").
  std::string name_from(const std::string& base) const;
};

/// One model chunk of a pipeline rank: blocks [first_layer, last_layer) with
/// `slots` activation sets, so that many micro-batches can sit between their
/// forward and their backward (or weight-gradient pass) on this chunk.
struct PipelineChunk {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // exclusive; -1: n_layer
  int64_t slots = 1;
};

/// The layers one pipeline rank holds (GPipe, Huang et al. 2019): blocks
/// [first_layer, last_layer); the rank holding layer 0 also holds the
/// embeddings, the one holding the last layer the final LayerNorm and the head,
/// which is tied to wte, so that rank keeps its own copy of the embedding unit.
/// `slots` activation sets let that many micro-batches sit between their
/// forward and their backward. Interleaved schedules (Narayanan et al. 2021,
/// sec. 2.2.2) give a rank several non-contiguous chunks instead: `chunks`, in
/// increasing layer order, replaces first_layer/last_layer/slots when non-empty.
struct PipelineStage {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // exclusive; -1: n_layer
  int64_t slots = 1;
  std::vector<PipelineChunk> chunks;
  /// The chunks with -1 resolved (one chunk when `chunks` is empty).
  std::vector<PipelineChunk> resolved(int64_t n_layer) const;
};

/// Activation checkpointing (Chen et al. 2016; Korthikanti et al. 2022, sec. 5):
/// none keeps every block activation; selective keeps all but the attention
/// internals (scores, head-major q/k/v, attention output) and the GELU output,
/// recomputed in backward from the stored QKV and c_fc outputs; full keeps only
/// each block's output (the next block's input) and recomputes the whole block
/// in backward. Recomputation uses the same kernels, inputs and dropout keys,
/// so the results are bitwise those of `none`.
enum class Recompute : uint8_t { none, selective, full };
/// "none" | "selective" | "full"; throws ConfigError naming the choices.
Recompute parse_recompute(const std::string& s);

/// Mixed precision of the model's compute: `compute` is the run's dtype (bf16 /
/// fp16 round every matmul operand to it); `operands` the dtype those operands
/// are stored in: `compute`, or f32 (rounded values, --matmul-precision fp32).
/// Half operands are multiplied by oneDNN's half x half -> f32 matmul where the
/// CPU has one (kernels::half_matmul_supported), else widened exactly and
/// multiplied in f32 (kernels::gemm_typed). The activations kept for backward
/// (all but the LayerNorm statistics, the residual stream included) take
/// operands' size.
struct Precision {
  DType compute = DType::f32;
  DType operands = DType::f32;
  /// Keep the residual stream in f32, unrounded (torch autocast's numerics,
  /// Megatron-LM's --fp32-residual-connection); by default a half compute
  /// dtype rounds it to `compute` and stores it in `operands`.
  bool fp32_residual = false;
  /// The dtype the blocks keep the residual stream in.
  DType residual() const { return fp32_residual ? DType::f32 : operands; }
  /// The precision a run of `compute` gets: operands in `compute` when
  /// `half_matmuls` (--matmul-precision half), else f32.
  static Precision of(DType compute, bool half_matmuls = true);
};

}  // namespace braid::model
