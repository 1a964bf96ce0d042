// Tensor-parallel layers (Shoeybi et al. 2019, "Megatron-LM", sec. 3) and their
// communication mappings, with sequence parallelism (Korthikanti et al. 2022,
// sec. 4.2). A model's block code calls these in order; at TP = 1 each one is
// the plain op (the same kernel calls, bitwise), so the block has no fork.
//
// Layouts: a micro-batch has BT token rows of C features. Without sequence
// parallelism every TP rank holds all BT rows of the residual stream; with it,
// rank r holds rows [r * BT/TP, (r+1) * BT/TP) ("local rows"). A column-parallel
// linear layer's weight is split along its output features (this rank: N/TP), a
// row-parallel one's along its input features; the vocabulary is split for the
// embedding and the loss (this rank: Vp/TP columns starting at rank * Vp/TP).
// Buffers are row-major and f32, except the linear layers' matmul operands
// (operand_dtype()).
#pragma once
#include <cstddef>
#include <cstdint>

#include "braid/core/dtype.h"

namespace braid::comm {
class Communicator;
}

namespace braid::parallel::tensor {

/// The TP group: comm == nullptr means TP = 1. With sequence_parallel the
/// residual stream (LayerNorm, dropout, residual adds) holds local rows only.
struct TensorParallel {
  comm::Communicator* comm = nullptr;
  bool sequence_parallel = false;
  int size() const;
  int rank() const;
};

/// One rank's tensor-parallel layers for micro-batches of BT token rows. Holds
/// no tensors: weights, activations and gradients are the caller's. `gather`
/// is scratch of BT x C floats the caller allocates when sequence parallelism
/// is on (size > 1), used for gathered rows and partial sums. `matmul_scratch`
/// (or nullptr) is the linear layers' backward scratch: at least
/// kernels::matmul_backward_scratch_floats(BT, in, out) floats for each layer
/// the caller runs (model::memory_plan sizes it).
class TensorParallelLayers {
 public:
  TensorParallelLayers(const TensorParallel& tp, int64_t C, float* gather, float* matmul_scratch = nullptr);

  /// Sets the token rows of the next calls (BT = B * T). Throws braid::Error
  /// when sequence parallelism is on and TP does not divide BT.
  void set_rows(int64_t BT);
  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sp_; }
  /// Rows of the residual stream on this rank (BT, or BT/TP under SP), and the
  /// global index of the first of them.
  int64_t local_rows() const { return rows_; }
  int64_t first_row() const { return row0_; }

  // ---- mappings ----
  /// Input of a column-parallel layer: all BT rows (all-gathered into scratch
  /// under SP; otherwise `local` itself).
  const float* gather_rows(const float* local);
  /// gather_rows for a matmul operand stored in operand_dtype().
  const void* gather_operand(const void* local);
  /// Sums a row-parallel layer's partial output (BT x C, may be overwritten)
  /// over TP into this rank's rows `out` (all-reduce, or reduce-scatter under
  /// SP); at TP = 1 copies when out != partial.
  void reduce_rows(float* partial, float* out);
  /// Backward of gather_rows / the identity before a column-parallel layer:
  /// sums the partial input gradient dfull (BT x C) over TP and returns this
  /// rank's rows of it (within dfull).
  float* reduce_input_grad(float* dfull);
  /// Sums n floats over TP in place (partial gradients of replicated tensors).
  void all_reduce_sum(float* x, size_t n);

  // ---- linear layers (y = x W^T + b, W stored (out, in)) ----
  // The matmul operands x, W and dy are stored in operand_dtype() (f32 by
  // default; bf16 / fp16 for half-precision compute); outputs, input
  // gradients, weight and bias gradients and biases are f32.
  /// out (BT x Nl) = gather_rows(in) (K features) @ W^T + b; W is this rank's
  /// Nl = N/TP output rows, b its Nl entries.
  void column_forward(float* out, const void* in, const void* W, const float* b, int64_t K, int64_t Nl);
  /// out (local rows x N) = sum over TP of in (BT x Kl) @ W^T, plus b (N,
  /// replicated); W holds this rank's Kl input columns.
  void row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl, int64_t N);
  /// Backward of column_forward: dW += dout^T gather_rows(in), db += column
  /// sums of dout (null: skipped); din_full (BT x K) = dout @ W, this rank's
  /// partial. Returns reduce_input_grad(din_full). dW == nullptr skips W
  /// (the zero-bubble split adds it later with column_weight_grad).
  float* column_backward(float* din_full, float* dW, float* db, const void* dout, const void* in,
                         const void* W, int64_t K, int64_t Nl);
  void column_weight_grad(float* dW, const void* dout, const void* in, int64_t K, int64_t Nl);
  /// Backward of row_forward from this rank's rows of d(out): dW, db as above
  /// (db replicated, the same on every rank), din (BT x Kl) = gather(dout) @ W.
  void row_backward(float* din, float* dW, float* db, const void* dout_local, const void* in, const void* W,
                    int64_t Kl, int64_t N);
  void row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl, int64_t N);
  /// The dtype the linear layers' operands are stored in (default f32).
  void set_operand_dtype(DType t) { op_ = t; }
  DType operand_dtype() const { return op_; }

  // ---- vocabulary-parallel embedding and loss (V real, Vp padded entries) ----
  /// out (local rows x C) = wte[token] + wpe[position] for tokens (B, T); wte
  /// holds this rank's Vp/TP rows, wpe all positions.
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                         int64_t T, int64_t Vp);
  /// dwte (this rank's rows) and dwpe (+=) from d(out) (local rows x C). dwpe
  /// is partial under SP (sum it with all_reduce_sum).
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                          int64_t T, int64_t Vp);
  /// Cross-entropy over logits (BT x Vp/TP, this rank's vocabulary columns,
  /// stored in operand_dtype(): the head's output is a matmul operand's peer):
  /// losses and log-sum-exp per row (BT each, f32); targets == nullptr: lse
  /// only, losses unspecified. `stats` is 3 BT floats of scratch (TP > 1).
  void cross_entropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets, int64_t V,
                             int64_t Vp, float* stats);
  /// dlogits (f32) = scale * (softmax - onehot(target)) on this rank's columns
  /// (padding columns 0); logits as cross_entropy_forward's.
  void cross_entropy_backward(float* dlogits, const void* logits, const float* lse, const int32_t* targets,
                              float scale, int64_t V, int64_t Vp);

 private:
  comm::Communicator* comm_;
  bool sp_;
  int size_, rank_;
  int64_t C_;
  float* gather_;
  float* mm_scratch_;
  int64_t BT_ = 0, rows_ = 0, row0_ = 0;
  DType op_ = DType::f32;
};

}  // namespace braid::parallel::tensor
