// The operators a model's block code calls -- linear layers (column- and
// row-parallel forms), attention, dropout, LayerNorm, the embedding and the LM
// head's loss -- behind one interface, so that a parallel strand supplies its
// own forms without a branch in the block code. This class is the plain form
// (one rank holds every head, feature, vocabulary entry and token: TP = 1);
// parallel/tensor/ overrides it with the tensor-parallel forms (Megatron-LM,
// Shoeybi et al. 2019) and sequence parallelism (Korthikanti et al. 2022); a
// context-parallel strand overrides attention (ring or all-to-all), the
// positions and the dropout rows (see SequenceLayout and attention_forward).
//
// Layouts. A micro-batch has B sequences of T tokens on this rank: BT = B*T
// token rows of C features. The residual stream (LayerNorm, dropout, residual
// adds) holds local_rows() of them, the first being global row first_row()
// (all BT rows unless sequence parallelism splits them). A column-parallel
// linear layer's weight holds this rank's slice of the output features and
// reads all BT rows (under sequence parallelism it all-gathers the
// LayerNorm's local rows: the gather is the column layer's input mapping); a
// row-parallel one holds a slice of the input features and sums its output
// over the group into the local rows (a reduce-scatter under sequence
// parallelism: the scatter back to the LayerNorm's layout).
//
// Dtypes. Buffers are f32 except the matmul operands -- linear layers' x, W
// and dy, the logits, attention's q, k, v and saved tensors -- which are stored
// in operand_dtype() (f32, or the half compute dtype).
//
// Ownership. The model owns every tensor and workspace; their sizes come from
// model::memory_plan and the workspace is handed over once by bind(). An
// operator keeps pointers only and allocates nothing.
//
// Communication. Only the calls documented as such communicate, and then over
// the operator's own group; every rank of that group makes the same calls in
// the same order (they are collectives). The plain forms never communicate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "braid/core/dtype.h"

namespace braid::model {

/// Consecutive global positions [first, first + count) of a sequence.
struct TokenSpan {
  int64_t first = 0, count = 0;
};

/// Where this rank's T tokens of each sequence sit among the sequence's T_seq
/// tokens: spans in the order the rank stores them. One span {0, T} unless a
/// strand splits the sequence (context parallelism over CP ranks with causal
/// load balance: chunks r and 2 CP - 1 - r of 2 CP).
struct SequenceLayout {
  int64_t T_seq = 0;
  std::vector<TokenSpan> spans;
};

/// q (B, T, heads, head_dim) and k, v (B, T, kv heads, head_dim) of this
/// rank's tokens in the operand dtype, token rows `ld` elements apart:
/// c_attn's packed output (B, T, C_l + 2 KV_l) gives q = qkv, k = qkv + C_l,
/// v = qkv + C_l + KV_l, ld = C_l + 2 KV_l (C_l = heads * head_dim, KV_l =
/// kv heads * head_dim; 3 C_l without grouped-query attention).
struct AttentionInputs {
  const void *q, *k, *v;
  int64_t ld;
};

/// dq, dk, dv (f32), laid out like AttentionInputs.
struct AttentionGrads {
  float *dq, *dk, *dv;
  int64_t ld;
};

/// What attention keeps from forward to backward: two regions of activation
/// memory the model owns per block (sized by model::memory_plan, rebuilt by
/// recomputation): `heads` of 3 B heads T head_dim elements in the operand
/// dtype, and `lse` of B heads T floats. The plain form (the fused kernel,
/// kernels/cpu/flash_attention.h) keeps q, k, v head-major (3, B, heads, T,
/// head_dim) and the log-sum-exp of each query row's scores (B, heads, T);
/// another form may keep what it needs within those sizes. A model that plans
/// the kernel that saves the probabilities (AttentionShape::fused false: short
/// sequences) gives `lse` room for them instead, B heads T T elements in the
/// operand dtype. Backward also reads `out`, the forward's output as the block
/// keeps it (B, T, heads * head_dim, operand dtype; null in forward).
struct AttentionSaved {
  void* heads;
  float* lse;
  const void* out = nullptr;
};

/// One attention call: B sequences of this rank's T tokens (sequence() says
/// which), `heads` of this rank's heads of head_dim. Operands are stored in
/// `store`; the probabilities and output gradients are rounded to `round`
/// (the compute dtype) before they multiply.
struct AttentionShape {
  int64_t B, T, heads, head_dim;
  DType store = DType::f32, round = DType::f32;
  bool fused = true;  // the model planned the fused kernel (Operators::fused_attention)
  /// This rank's key/value heads (grouped-query attention; 0: heads). q is
  /// heads * head_dim wide, k and v kv_heads * head_dim each.
  int64_t kv_heads = 0;
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  /// Elements of a packed [q | k | v] row.
  int64_t qkv_width() const { return (heads + 2 * kv()) * head_dim; }
};

/// Mask of one dropout site: keyed by (seed, stream) and the global token row
/// row_base + global row of the micro-batch, so every layout draws the
/// single-rank run's mask (kernels::dropout).
struct DropoutKey {
  float p;
  uint64_t seed, stream;
  int64_t row_base;
};

/// The model's workspace for the operators (bind()).
struct OperatorWorkspace {
  int64_t C = 0;                  // features of the residual stream
  DType operands = DType::f32;    // the matmul operands' dtype
  float* gather = nullptr;        // BT x C floats when sequence_parallel() (else null)
  float* matmul = nullptr;        // the linear layers' backward scratch (or null)
  float* attention = nullptr;     // attention's forward/backward scratch
  float* loss_stats = nullptr;    // 3 BT floats when tp_size() > 1 (else null)
};

/// The plain operators (TP = 1). Methods are virtual so a strand overrides
/// what its layout changes; each is called once per layer, never per element.
class Operators {
 public:
  virtual ~Operators() = default;

  // ---- the layout ----
  /// Ranks the heads, MLP features and vocabulary are split over, this rank's
  /// index among them, and whether sequence parallelism was asked for (the
  /// model sizes its buffers from these before bind()).
  virtual int tp_size() const { return 1; }
  virtual int tp_rank() const { return 0; }
  virtual bool sequence_parallel() const { return false; }
  /// Whether attention runs the fused kernel for micro-batches of up to max_T
  /// tokens per sequence (the model sizes what attention saves by it): from
  /// kernels::kFusedAttentionMinT on; below, the kernel that saves the
  /// probabilities, which is faster there.
  virtual bool fused_attention(int64_t max_T) const;
  /// Floats of attention workspace this form needs for micro-batches of up to
  /// B x T tokens of Cl features in NHl query heads over NKVl key/value heads
  /// (0: NHl) (0: the fused kernel's own, which memory_plan always counts).
  virtual size_t attention_scratch_floats(int64_t B, int64_t T, int64_t Cl, int64_t NHl, DType operands,
                                          int64_t NKVl = 0) const {
    return 0;
  }
  /// Takes the model's workspace; called once, before any other call below.
  /// Throws braid::Error when a buffer the layout needs is missing.
  virtual void bind(const OperatorWorkspace& ws);
  /// Sets the micro-batch (B sequences of T tokens on this rank) of the next
  /// calls: local rows, first row and sequence(). Throws braid::Error when the
  /// layout cannot split B*T rows.
  virtual void set_batch(int64_t B, int64_t T);
  int64_t local_rows() const { return rows_; }
  int64_t first_row() const { return row0_; }
  const SequenceLayout& sequence() const { return seq_; }
  DType operand_dtype() const { return ws_.operands; }
  /// Whether the gradients of group-replicated tensors (LayerNorms, wpe) are
  /// partial per rank (each saw only its rows) and need sum_replicated_grads.
  virtual bool replicated_grads_partial() const { return false; }
  /// Sums n floats of such a gradient over the group in place (communicates).
  virtual void sum_replicated_grads(float* g, size_t n);

  // ---- linear layers: y = x W^T + b, W stored (out, in) ----
  // x, W, dy in operand_dtype(); outputs, input gradients, weight and bias
  // gradients (+=) and biases f32; dW == nullptr skips the weight gradient
  // (the zero-bubble split adds it later with *_weight_grad), db == nullptr
  // the bias's.
  /// out (BT, Nl) = rows(in) (K features) @ W^T + b; W holds this rank's Nl
  /// output features, b their Nl entries. Communicates under SP (all-gather).
  virtual void column_forward(float* out, const void* in, const void* W, const float* b, int64_t K,
                              int64_t Nl);
  /// Backward of column_forward: dW += dout^T rows(in), db += column sums of
  /// dout (BT, Nl); din_full (BT, K) = dout @ W, this rank's partial. Returns
  /// this rank's rows of the summed input gradient (within din_full).
  /// Communicates when split (all-reduce, or reduce-scatter under SP).
  virtual float* column_backward(float* din_full, float* dW, float* db, const void* dout, const void* in,
                                 const void* W, int64_t K, int64_t Nl);
  virtual void column_weight_grad(float* dW, const void* dout, const void* in, int64_t K, int64_t Nl);
  /// out (local rows, N) = sum over the group of in (BT, Kl) @ W^T, plus b
  /// (N, replicated); W holds this rank's Kl input features. Communicates when
  /// split (all-reduce, or reduce-scatter under SP).
  virtual void row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl, int64_t N);
  /// Backward of row_forward from this rank's rows of d(out): din (BT, Kl) =
  /// rows(dout) @ W; dW, db as above (db the same on every rank).
  virtual void row_backward(float* din, float* dW, float* db, const void* dout_local, const void* in,
                            const void* W, int64_t Kl, int64_t N);
  virtual void row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl, int64_t N);

  // ---- causal self-attention over this rank's heads and tokens ----
  /// out (B, T, heads * head_dim) f32 (=) = softmax(q k^T / sqrt(head_dim) +
  /// causal mask by global position) v, for every query token of this rank
  /// against every key of the sequence at or before it; the positions of the
  /// rank's tokens are sequence() (set by set_batch). Fills `saved`. The plain
  /// form is kernels::attention_forward on the packed qkv (throws braid::Error
  /// on other views or a split sequence); a context-parallel form sees only
  /// its T of T_seq tokens and fetches the other ranks' k, v (ring: blocks
  /// travel round the group while the rank computes, partial outputs merged
  /// by log-sum-exp; all-to-all: the token split becomes a head split and
  /// back), so it may communicate.
  virtual void attention_forward(float* out, const AttentionSaved& saved, const AttentionInputs& qkv,
                                 const AttentionShape& s);
  /// Backward: dq, dk, dv (=) of this rank's tokens from dout (B, T, heads *
  /// head_dim, f32) and `saved`. May communicate
  /// (a ring form returns the k, v gradients to their owners).
  virtual void attention_backward(const AttentionGrads& d, const float* dout, const AttentionSaved& saved,
                                  const AttentionShape& s);

  // ---- the residual stream's row-wise operators (local rows, f32) ----
  /// out (local rows, C) = dropout of in (may alias) with the mask of `key`
  /// at each row's global index; the same call on a gradient is the backward.
  virtual void dropout(float* out, const float* in, int64_t C, const DropoutKey& key);
  /// LayerNorm (kernels::layernorm_forward / _backward) over the local rows:
  /// out, mean, rstd from x, weight, bias; backward dx, dweight, dbias (+=).
  virtual void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                            const float* bias, int64_t C);
  virtual void norm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                             const float* weight, const float* mean, const float* rstd, int64_t C);
  /// RMSNorm (kernels::rmsnorm_forward / _backward) over the local rows: out
  /// and rstd from x and weight; backward dx, dweight (+=).
  virtual void rms_norm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t C, float eps);
  virtual void rms_norm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                                 const float* rstd, int64_t C);
  /// pos (T) = the global position of each of this rank's T tokens of a
  /// sequence, in the order it stores them (sequence()): what rotary
  /// positions turn by, so a split sequence turns as one rank does.
  void token_positions(int64_t* pos) const;

  // ---- embedding and loss over the vocabulary (V real, Vp padded entries) ----
  /// out (local rows, C) = wte[token] + wpe[position] for tokens (B, T); wte
  /// holds this rank's Vp / tp_size() rows, wpe every position (null: no
  /// learned positions, as with rotary ones; dwpe below is then null too). Communicates
  /// when the vocabulary is split (the partial lookups are summed).
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                 int64_t Vp);
  /// dwte (this rank's rows) and dwpe (+=) from d(out) (local rows, C). dwpe
  /// is partial when replicated_grads_partial(). Communicates under SP.
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                  int64_t Vp);
  /// Cross-entropy of the LM head's logits (BT, Vp / tp_size(): this rank's
  /// vocabulary columns, operand dtype; the head itself is column_forward
  /// with wte as the weight): losses and log-sum-exp per row (BT each, f32);
  /// targets == nullptr: lse only. Communicates when the vocabulary is split.
  virtual void cross_entropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets,
                                     int64_t V, int64_t Vp);
  /// dlogits (f32, =) = scale * (softmax - onehot(target)) on this rank's
  /// columns, padding columns 0.
  virtual void cross_entropy_backward(float* dlogits, const void* logits, const float* lse,
                                      const int32_t* targets, float scale, int64_t V, int64_t Vp);

 protected:
  /// The kernels read c_attn's packed output: q, k, v side by side in each
  /// token row. Returns q as the start of that (B, T, s.qkv_width()) buffer; throws
  /// braid::Error for other views.
  static const void* packed_qkv(const AttentionInputs& in, const AttentionShape& s);
  /// True when this rank holds every token of its sequences, in order.
  bool whole_sequences() const;
  /// Calls fn(i, n, b, position) for each run of the local rows [row0, row0 +
  /// rows) whose positions are consecutive: rows i .. i + n - 1 (from the
  /// first local row) are tokens position .. position + n - 1 of sequence b.
  void for_position_runs(const std::function<void(int64_t, int64_t, int64_t, int64_t)>& fn) const;
  /// out (local rows, C) += wpe at each row's global position.
  void add_positions(float* out, const float* wpe);
  /// dwpe (+=) at each local row's global position from dout (local rows, C).
  void position_grads(float* dwpe, const float* dout);

  OperatorWorkspace ws_;
  int64_t B_ = 0, T_ = 0, BT_ = 0, rows_ = 0, row0_ = 0;
  SequenceLayout seq_;
};

}  // namespace braid::model
