// A decoder-only transformer of pre-norm blocks assembled from the parts the
// configuration names (block_parts.h): GPT-2 (Radford et al. 2019: LayerNorm,
// learned positions, tanh-GELU MLP, biases, LM head tied to the token
// embedding) or a Llama-family block (Touvron et al. 2023; Meta's Llama 3:
// RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, an
// untied head). One rank's model on the CPU with flat parameter/gradient
// buffers (docs/ARCHITECTURE.md) and activations allocated once.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/dtype.h"
#include "braid/core/memory.h"
#include "braid/core/span_sink.h"
#include "braid/kernels/cpu/rope.h"
#include "braid/model/config.h"
#include "braid/model/memory_plan.h"
#include "braid/model/operators.h"
#include "braid/model/param_layout.h"
#include "braid/model/unit_storage.h"

namespace braid::model {

struct NormPart;
struct MlpPart;
struct PositionPart;

/// Training FLOPs per token of cfg at sequence length T (GPT::flops_per_token).
int64_t model_flops_per_token(const GPTConfig& cfg, int64_t T);

/// The language model on one rank.
///
/// Parameter order in the flat buffer (GPT-2's HF names): wte.weight (Vp, C),
/// wpe.weight (block_size, C; learned positions only); per block i:
/// h.i.ln_1.{weight,bias} (C; RMSNorm: weight only), h.i.attn.c_attn.weight
/// (C + 2 KV, C: [q | k | v], KV = n_kv_head x head size), .bias,
/// h.i.attn.c_proj.weight (C, C), .bias (C), h.i.ln_2.{weight,bias} (C),
/// h.i.mlp.c_fc.weight (F, C: F = hidden, or [gate | up] of 2 x hidden for
/// SwiGLU), .bias (F), h.i.mlp.c_proj.weight (C, hidden), .bias (C); then
/// ln_f.{weight,bias} and, untied, lm_head.weight (Vp, C). Biases are absent
/// when the configuration has none.
/// Matrices are stored (out_features, in_features) like torch.nn.Linear -- the
/// transpose of HF's Conv1D layout. Each tensor starts at a multiple of 16
/// floats; the gaps are zero and count in num_params().
/// A tied LM head reuses wte; logits columns >= vocab_size are padding that
/// receive no probability mass and zero gradient.
class GPT {
 public:
  /// Allocates parameters (compute_params), gradients (grads), activations for
  /// max_B x max_T (activations) and backward scratch (workspace) once, tagged
  /// in `ledger` if given. Throws ConfigError on an invalid config or when
  /// max_T > block_size.
  /// With `storage` the model allocates no parameters or gradients: forward and
  /// backward take them unit by unit from `storage` (which must outlive the
  /// model), params()/grads() return nullptr and backward's on_ready is unused.
  /// ops: the operators the blocks call (operators.h), which also say how
  /// heads, features, vocabulary and token rows are split over ranks (null:
  /// the plain ones, TP = 1; parallel/tensor/ makes the tensor-parallel ones);
  /// dropout: probability of the embedding and residual dropouts (GPT-2's
  /// embd_pdrop / resid_pdrop).
  /// precision: the compute dtype and the matmul operands' (compute_dtype()).
  /// Throws ConfigError when TP does not divide n_head, padded_vocab_size or
  /// (sequence parallel) max_B * max_T, or when the operands are in a half
  /// dtype other than the compute dtype, oneDNN has no matmul for it here, or
  /// the storage keeps no compute copy of the parameters.
  GPT(const GPTConfig& cfg, int64_t max_B, int64_t max_T, MemoryLedger* ledger = nullptr,
      UnitStorage* storage = nullptr, std::unique_ptr<Operators> ops = nullptr, float dropout = 0.0f,
      const PipelineStage& stage = {}, Recompute recompute = Recompute::none, const Precision& precision = {});

  int num_units() const { return int(cfg_.n_layer) + 2; }
  size_t unit_begin(int u) const { return units_[size_t(u)]; }
  size_t unit_end(int u) const { return units_[size_t(u) + 1]; }

  const GPTConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& param_table() const { return table_; }
  /// Elements in the flat parameter buffer (including alignment gaps).
  size_t num_params() const { return num_params_; }
  float* params() { return params_.as<float>(); }
  const float* params() const { return params_.as<float>(); }
  float* grads() { return grads_.as<float>(); }
  /// The flat gradient buffer itself (empty with external storage), for a data-
  /// parallel engine that moves it into shared memory before the first step.
  Buffer& grad_buffer() { return grads_; }
  const float* grads() const { return grads_.as<float>(); }
  /// Looks up a parameter by HF name; throws braid::Error if absent.
  const ParamInfo& param(const std::string& name) const;

  /// GPT-2 initialisation: weights ~ N(0, 0.02) with element e of parameter p
  /// drawn as 0.02 * rand_normal(seed, p, e) (p = index in param_table(), so any
  /// slice is reproducible on any rank); attn.c_proj and mlp.c_proj weights use
  /// std 0.02 / sqrt(2 n_layer) (GPT-2 paper sec. 2.3); biases 0; LayerNorm
  /// weight 1, bias 0; wte rows >= vocab_size are 0.
  void init_weights(uint64_t seed);
  /// The same initial values for flat elements [lo, hi) only, written to
  /// dst[0, hi - lo) (gaps between tensors are 0): lets a rank initialise just
  /// the shard it owns. Throws braid::Error if hi > num_params() or lo > hi.
  void init_weights_range(uint64_t seed, float* dst, size_t lo, size_t hi) const;

  /// Forward pass on tokens (B, T) int32. With targets (B, T) returns the mean
  /// cross-entropy over the B*T positions and remembers them for backward;
  /// with targets == nullptr computes logits only and returns 0. Allocates
  /// nothing. Throws braid::Error if B > max_B, T > max_T or a token/target is
  /// outside [0, vocab_size).
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  /// (B, T, Vp/tp) logits of the last forward, stored in logits_dtype()
  /// (columns >= vocab_size hold padding); backward may overwrite them.
  const void* logits() const { return logits_; }
  /// The dtype logits() are stored in: the matmul operands' (bf16 when a
  /// half-precision run multiplies in it, else f32).
  DType logits_dtype() const { return op_; }
  /// dst (n_rows, Vp/tp) f32 = rows [row0, row0 + n_rows) of logits(), widened exactly.
  void logits_to_f32(float* dst, int64_t row0, int64_t n_rows) const;

  /// grads() = 0 (no-op with external storage, which zeroes its own buffers).
  void zero_grad();

  /// Sequence parallelism leaves the gradients of TP-replicated parameters
  /// (LayerNorms, wpe) partial per rank; backward sums them over TP when this is
  /// true (default). With gradients accumulated over micro-batches (owned, or
  /// a storage that accumulates_in_place), set it only for the last
  /// micro-batch so the sum happens once; a storage with per-micro-batch
  /// buffers is summed every time.
  void set_tp_grad_sync(bool on) { tp_grad_sync_ = on; }
  /// Dropout masks of the next forward/backward: keyed by (seed, stream) and
  /// the global token row (row_base + row in this micro-batch), so any layout
  /// draws the single-rank run's masks. Dropout is off when p = 0 (the default).
  void set_dropout_key(uint64_t seed, uint64_t stream, int64_t row_base) {
    drop_seed_ = seed, drop_stream_ = stream, drop_row_base_ = row_base;
  }
  /// Evaluation and sampling: no dropout.
  void set_training(bool on) { training_ = on; }
  /// Forward and backward of each unit (embedding, block l, head; recomputation and
  /// the split backward's weight pass too) become spans in `sink` (null: none).
  void set_span_sink(SpanSink* sink) { sink_ = sink; }
  const Operators& operators() const { return *ops_; }

  // ---- pipeline stage ----
  /// This rank holds the embeddings (layer 0) / the final LayerNorm and head.
  bool is_first_stage() const { return owns_embed_; }
  bool is_last_stage() const { return owns_head_; }
  int num_chunks() const { return int(chunks_.size()); }
  /// Chunk c holds layer 0 (runs the embedding) / the last layer (runs the head and loss).
  bool chunk_has_embed(int c) const { return chunks_[size_t(c)].embed; }
  bool chunk_has_head(int c) const { return chunks_[size_t(c)].head; }
  int64_t chunk_slots(int c) const { return chunks_[size_t(c)].slots; }
  /// Selects chunk c and its activation set k (0 <= k < chunk_slots(c)) for the
  /// following forward/backward passes; stage_input/stage_output refer to it.
  /// Throws braid::Error when c or k is out of range.
  void set_slot(int64_t k, int c = 0);
  /// Token rows x C of the stage boundary for a (B, T) micro-batch (B*T, or
  /// B*T/TP under sequence parallelism).
  int64_t boundary_rows(int64_t B, int64_t T) const;
  /// Current slot: where a later stage receives its input before forward.
  float* stage_input() { return encoded_; }
  /// Current slot: the stage's output after forward (the last local block's
  /// output, f32; under a half compute dtype its values are that dtype's).
  const float* stage_output() const;
  /// Where a stage other than the last receives d(output) before backward;
  /// after backward on a stage other than the first it holds d(input).
  float* boundary_grad() { return dres_; }

  /// Accumulates (+=) into grads() the gradient of loss_scale * (mean loss of the
  /// last forward). on_ready(begin, end) is called with element ranges of
  /// grads() as soon as they are final: [ln_f.weight, end), then block L-1 ..
  /// block 0 (each one range), then [0, h.0 start) for wte + wpe (wte last since
  /// it also collects the head's gradient). The ranges tile [0, num_params())
  /// exactly once in decreasing order. Throws if the last forward had no targets.
  void backward(float loss_scale, const std::function<void(size_t begin, size_t end)>& on_ready = {});

  /// Zero-bubble split of backward (Qi et al. 2024, "Zero Bubble Pipeline
  /// Parallelism", sec. 2): backward_input ("B") computes the input gradients
  /// (boundary_grad()), LayerNorm and bias gradients, and stashes each matmul's
  /// output gradient in the current slot, over activations B no longer needs
  /// (logits, qkvr, fch, attproj, fcproj: the same sizes), so the slot does not
  /// grow; backward_weight ("W") later adds the matmul weight gradients
  /// dW += dout^T x from the stash and the kept inputs. B then W of a
  /// micro-batch accumulate bitwise what backward() does. Needs Recompute::none.
  /// With a UnitStorage both passes acquire and hand back the units they touch
  /// (each pass's part is added separately); with owned gradients they report
  /// no ranges. Throws braid::Error otherwise or when backward_weight runs on a
  /// slot without a finished B.
  void backward_input(float loss_scale);
  void backward_weight();

  /// Training FLOPs per token at sequence length T (PaLM, Chowdhery et al. 2022,
  /// App. B): 6 N + 12 n_layer n_embd T, where N counts the weights that take
  /// part in matmuls: per block c_attn (C x (C + 2 KV)), attn.c_proj (C x C),
  /// c_fc (C x F) and mlp.c_proj (hidden x C) -- 12 C^2 for GPT-2 -- plus the
  /// head Vp x C (the padded vocabulary is what is computed). Attention's
  /// term counts the C query features (grouped key/value heads do not shrink
  /// it). Embedding lookups, biases, norms and the activations are excluded.
  int64_t flops_per_token(int64_t T) const;

  /// Mixed precision on the CPU (the constructor's `precision`): with bf16 /
  /// f16 compute every matmul multiplies half-precision operands and
  /// accumulates in f32, as a tensor-core GEMM does. Every tensor a matmul
  /// reads or writes is rounded to the compute dtype: in forward ln1, qkv
  /// (and its head-major copy), the attention probabilities, atty, attproj,
  /// ln2, fch, the GELU output, fcproj, lnf and the logits; in backward each
  /// output gradient (including attention's dY and dS). The weights come in
  /// it from the UnitStorage. The residual stream (the stage input, res2,
  /// res3) is added in f32 and rounded to the compute dtype, as Megatron-LM
  /// keeps it without --fp32-residual-connection; Precision::fp32_residual
  /// keeps it in f32 instead, as torch autocast does. LayerNorm, softmax,
  /// GELU and the loss compute in f32 from those values, and every gradient
  /// the matmuls produce stays in f32. With operands in the compute dtype
  /// (half_matmuls()) those tensors are stored in it (half the activation
  /// memory; the residual's f32 working copies are scratch, the stage output
  /// one f32 tensor), the weights are the storage's compute copy
  /// (UnitStorage::compute_params) and oneDNN multiplies them (in f32 after
  /// an exact widening where it has no matmul for the dtype: fp16 on CPUs
  /// without AVX512-FP16); with f32 operands they are rounded in place in f32
  /// buffers and multiplied in f32 (the same products, exact in f32; the sums
  /// may round differently).
  DType compute_dtype() const { return compute_dtype_; }
  /// True when the matmul operands and activations are stored in the compute
  /// dtype (Precision::operands).
  bool half_matmuls() const { return half_ops_; }
  /// The dtype the matmuls multiply in: the compute dtype when its operands
  /// are stored in it and oneDNN has a matmul for it here, else f32.
  DType matmul_dtype() const;

  int64_t max_B() const { return max_B_; }
  int64_t max_T() const { return max_T_; }

 private:
  struct LayerParams {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb,
        *fcprojw, *fcprojb;
    // The matmul weights as operands: the f32 ones, or the storage's compute copy.
    const void *qkvw_op, *attprojw_op, *fcw_op, *fcprojw_op;
  };
  /// Block activations; all but the LayerNorm statistics and attention's
  /// log-sum-exp hold op_ elements (half of the floats when op_ is a half dtype).
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *qkvr, *lse, *atty, *attproj, *res2, *ln2,
        *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
  };
  /// units_ from the layout, and the partial gradients of TP-replicated tensors per unit.
  void build_units();
  /// Flat ranges of the blocks' matmul weights (c_attn, attn.c_proj, c_fc, mlp.c_proj).
  std::vector<std::pair<size_t, size_t>> matmul_weight_ranges() const;
  /// Each chunk's activation slots in acts_, as the plan sized them.
  void layout_activations(const GPTMemoryPlan& plan, const std::vector<PipelineChunk>& chunks);
  /// The backward and TP scratch pointers in scratch_, as the plan sized them.
  void layout_scratch(const GPTMemoryPlan& plan);
  /// Unit of block l of the current chunk (units count the rank's kept blocks in layer order).
  int unit_of_block(int64_t l) const { return (has_unit0_ ? 1 : 0) + int(local0_ + l - l0_); }
  enum class BackwardPart : uint8_t { all, input, weight };
  /// Checks and copies a micro-batch's tokens and targets; sets B_, T_ and the TP rows.
  void set_inputs(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  /// Final LayerNorm, tied head and loss from the last block's output x;
  /// returns the mean loss (0 without targets).
  float head_forward(const float* x, bool with_targets);
  /// The loss's and head's backward into dres_; returns unit 0's gradient
  /// buffer (acquired, kept until the embedding's backward).
  float* head_backward(float loss_scale, bool split);
  /// Rebuilds block l's activations that the recompute mode did not keep; x is
  /// the block's input in f32 (read by full recomputation only, else null).
  void recompute_block(int64_t l, const LayerParams& p, const float* x);
  /// Block l's backward from dres_ (d of its output) to dres_ (d of its input).
  void block_backward(int64_t l, bool split);
  /// Hands unit u's finished gradient to the storage or on_ready.
  void unit_ready(int u, const std::function<void(size_t, size_t)>& on_ready);
  /// d(residual) reaching a dropped-out branch: dres_ masked like forward's dropout at `site`.
  float* branch_grad(uint64_t site);
  /// wte/wpe gradients of the embedding from d(encoded) (rows x C) into unit 0's
  /// gradient buffer G0, then their TP sync.
  void embedding_backward(const float* denc, float* G0);
  void backward_impl(float loss_scale, const std::function<void(size_t, size_t)>& on_ready,
                     BackwardPart part);
  void sync_replicated_grads(const float* unit_grads, int u);
  /// Rounds a matmul operand to the compute dtype in place (no-op in f32).
  void round_operand(float* a, int64_t n) const;
  /// Writes a matmul input of n values into `slot`: `produce(dst)` writes them
  /// in f32, into the slot itself (then rounded in place) or, when the operands
  /// are stored in the compute dtype, into `tmp` (n floats of scratch), cast into the slot.
  template <typename Produce>
  void produce_operand(float* slot, float* tmp, int64_t n, Produce&& produce);
  /// An output gradient g (n, f32) as a matmul operand: g rounded in place, or
  /// its copy in the compute dtype, in `dst` (n / 2 floats) or half_grad_.
  const void* grad_operand(float* g, int64_t n, void* dst = nullptr);
  /// Block l's matmul weights as operands (the compute copy of unit u when half_ops_).
  void set_weight_operands(LayerParams& p, int u, int64_t l) const;
  /// The head's weight as an operand from unit u's buffer `unit` (tied: unit 0's
  /// wte; else lm_head in the final unit), or the storage's compute copy.
  const void* head_weight_operand(const float* unit, int u);
  /// wpe in unit 0's buffer (null without learned positions).
  const float* wpe_of(const float* unit0) const;
  /// The final norm's weight and bias (null for RMSNorm) in unit uf's buffer.
  struct FinalNorm {
    float *weight, *bias;
  };
  FinalNorm final_norm(const float* unit, int uf) const;
  /// role_index_, block_tensors_, unit0_tensors_ and the head's indices from table_.
  void index_tensors();
  /// The rotary table of the current micro-batch's token positions (no-op without rotary positions).
  void update_rope_table();
  /// Turns q and k of a packed (BT, Cl + 2 KVl) f32 buffer (backward: their gradients back).
  void rotate_qk(float* qkv, bool backward) const;
  /// The current micro-batch's attention over this rank's heads.
  AttentionShape attention_shape() const;
  /// out (B, T, C/tp) f32 = attention of the block's qkv (a.qkv), saving a.qkvr and a.lse.
  void attend(float* out, const LayerActs& a);
  /// Dropout at `site` over the residual stream's rows (out, in: local rows x C; may alias).
  void drop(float* out, const float* in, uint64_t site);
  /// Pointers into a unit buffer of block l (flat element o at unit[o - unit_begin]).
  LayerParams layer_params(const float* unit, int64_t l) const;
  LayerActs layer_acts(int64_t l) const;
  /// One block's forward from input x (f32) into layer_acts(l) (also the full
  /// recomputation); returns its output res3 in f32 (res_x_ or output_ when
  /// the block keeps it in a half dtype).
  const float* block_forward(int64_t l, const LayerParams& p, const float* x);
  /// Rounds a residual-stream value (n, f32) to the compute dtype in place
  /// (unless fp32_residual) and, kept in a half dtype, stores its copy in the
  /// block's `saved` (op_).
  void keep_residual(float* saved, float* value, int64_t n);
  /// The residual-stream values a block saved (res2, res3: op_ elements) in
  /// f32: `saved` itself, or widened into `work` (rows x C floats).
  const float* residual_f32(const float* saved, float* work) const;
  /// Block l's input as forward saw it, in f32 (widened into res_x_ when kept in op_).
  const float* block_input(int64_t l);
  const float* acquire_params(int u);  // from storage_, or params_
  void release_params(int u);
  float* acquire_grads(int u);

  GPTConfig cfg_;
  int64_t max_B_, max_T_;
  std::vector<ParamInfo> table_;
  size_t num_params_ = 0;
  std::vector<size_t> layer_begin_;  // L + 2 entries: block starts, ln_f start, end
  std::vector<size_t> units_;        // L + 3 unit boundaries
  std::vector<std::vector<std::pair<size_t, size_t>>> partial_grads_;  // see sync_replicated_grads
  Buffer params_, grads_, acts_, scratch_;
  UnitStorage* storage_ = nullptr;   // external storage, or nullptr (params_/grads_)
  size_t layer_act_floats_ = 0;
  // Non-layer activations and scratch (pointers into acts_ / scratch_).
  float *encoded_, *output_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *lse_, *losses_;
  float *dres_, *dlogits_, *dln_, *dqkv_, *datty_, *dfch_;
  Buffer tokens_buf_;  // (max_B, max_T) x 2 int32: tokens, targets of the last forward
  int32_t *tokens_, *targets_;
  int64_t B_ = 0, T_ = 0;
  bool have_targets_ = false;
  DType compute_dtype_ = DType::f32;
  bool half_ops_ = false;     // matmul operands stored in compute_dtype_
  DType op_ = DType::f32;     // the dtype they are stored in
  void* half_grad_ = nullptr; // an output gradient in op_ (half_ops_)
  bool half_res_ = false;     // the blocks keep res2, res3 in op_ (a half dtype)
  bool round_res_ = true;     // the residual stream is rounded to compute_dtype_
  // half_res_: the residual stream's working values in f32 (rows x C each): a
  // block's input x (and output), and res2; the blocks keep op_ copies.
  float *res_x_ = nullptr, *res_2_ = nullptr;
  std::unique_ptr<Operators> ops_;  // what the blocks call; owns no tensors
  int tpn_ = 1, tpr_ = 0;
  bool sp_ = false;  // sequence parallelism asked for (sizes the residual stream's rows)
  bool fused_attention_ = true;  // the fused attention kernel (else the one saving the probabilities)
  // One rank's chunks: layers, slots and where their activation slots start.
  struct ChunkInfo {
    int64_t l0, l1, slots;
    bool embed, head;
    int64_t local0;       // index of block l0 among this rank's blocks
    size_t base;          // first activation float of the chunk's slots
    size_t slot_floats;   // activation floats of one slot
    int64_t token_slot0;  // first token-buffer slot of the chunk
  };
  std::vector<ChunkInfo> chunks_;
  std::vector<uint8_t> w_pending_;  // per token slot: a B whose W has not run
  // The current chunk (set_slot): its layers, slot and whether it embeds / has the head.
  int64_t l0_ = 0, l1_ = 0, slot_ = 0, local0_ = 0;
  int chunk_ = 0;
  bool has_embed_ = true, has_head_ = true;
  bool owns_embed_ = true, owns_head_ = true, has_unit0_ = true;  // over all chunks
  size_t slot_floats_ = 0;  // activation floats of one slot of the current chunk
  size_t shared_act_floats_ = 0;
  Recompute recompute_ = Recompute::none;
  float dropout_ = 0.0f;
  bool training_ = true, tp_grad_sync_ = true;
  SpanSink* sink_ = nullptr;
  uint64_t drop_seed_ = 0, drop_stream_ = 0;
  int64_t drop_row_base_ = 0;
  float* dtmp_ = nullptr;  // masked gradient rows (dropout)
  // The block's parts (block_parts.h) and where its tensors sit in table_.
  const NormPart* norm_ = nullptr;
  const MlpPart* mlp_ = nullptr;
  const PositionPart* pos_ = nullptr;
  std::array<int, size_t(BlockRole::count)> role_index_{};  // index within a block's tensors; -1 absent
  size_t block_tensors_ = 0, unit0_tensors_ = 0, lnf_index_ = 0, lm_head_index_ = 0;
  float* dact_ = nullptr;  // d(activation) of the MLP (dfch_ itself for GELU)
  // Rotary positions: inverse frequencies, the positions of the table and the table.
  std::vector<float> rope_inv_freq_;
  std::vector<int64_t> rope_pos_;
  kernels::RopeTable rope_;
};

}  // namespace braid::model
