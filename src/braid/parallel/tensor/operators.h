// Tensor-parallel operators (Shoeybi et al. 2019, "Megatron-LM", sec. 3) and
// their communication mappings, with sequence parallelism (Korthikanti et al.
// 2022, sec. 4.2): the forms of model::Operators (model/operators.h, which
// gives the layouts, dtypes and ownership) for a TP group. At TP = 1 every
// call is the plain operator's (the same kernel calls, bitwise).
//
// Splits: a column-parallel linear layer's weight along its output features
// (this rank: N/TP), a row-parallel one's along its input features, attention
// by heads (this rank: n_head/TP), the vocabulary for the embedding and the
// loss (this rank: Vp/TP entries starting at rank * Vp/TP). Without sequence
// parallelism every TP rank holds all BT rows of the residual stream; with it,
// rank r holds rows [r * BT/TP, (r+1) * BT/TP).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "braid/model/operators.h"

namespace braid::comm {
class Communicator;
}

namespace braid::parallel::tensor {

/// One rank's tensor-parallel operators over the TP group `comm` (nullptr:
/// TP = 1). Every call that communicates is a collective over `comm`.
class TensorParallelOperators : public model::Operators {
 public:
  /// sequence_parallel: the residual stream holds this rank's rows only (in
  /// effect when the group has more than one rank).
  TensorParallelOperators(comm::Communicator* comm, bool sequence_parallel);

  int tp_size() const override { return size_; }
  int tp_rank() const override { return rank_; }
  bool sequence_parallel() const override { return sp_flag_; }
  /// Throws braid::Error when sequence parallelism has no gather buffer.
  void bind(const model::OperatorWorkspace& ws) override;
  /// Throws braid::Error when sequence parallelism is on and TP does not divide B*T.
  void set_batch(int64_t B, int64_t T) override;
  bool replicated_grads_partial() const override { return sp_; }
  void sum_replicated_grads(float* g, size_t n) override;

  void column_forward(float* out, const void* in, const void* W, const float* b, int64_t K, int64_t Nl) override;
  float* column_backward(float* din_full, float* dW, float* db, const void* dout, const void* in, const void* W,
                         int64_t K, int64_t Nl) override;
  void column_weight_grad(float* dW, const void* dout, const void* in, int64_t K, int64_t Nl) override;
  void row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl, int64_t N) override;
  void row_backward(float* din, float* dW, float* db, const void* dout_local, const void* in, const void* W,
                    int64_t Kl, int64_t N) override;
  void row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl, int64_t N) override;

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t Vp) override;
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t Vp) override;
  void cross_entropy_forward(float* losses, float* lse, const void* logits, const int32_t* targets, int64_t V,
                             int64_t Vp) override;
  void cross_entropy_backward(float* dlogits, const void* logits, const float* lse, const int32_t* targets,
                              float scale, int64_t V, int64_t Vp) override;

 private:
  // ---- mappings ----
  /// Input of a column-parallel layer: all BT rows (all-gathered into the
  /// gather buffer under SP; otherwise `local` itself).
  const float* gather_rows(const float* local);
  /// gather_rows for a matmul operand stored in operand_dtype().
  const void* gather_operand(const void* local);
  /// Sums a row-parallel layer's partial output (BT x C, may be overwritten)
  /// over TP into this rank's rows `out` (all-reduce, or reduce-scatter under SP).
  void reduce_rows(float* partial, float* out);
  /// Backward of gather_rows / the identity before a column-parallel layer:
  /// sums the partial input gradient dfull (BT x C) over TP and returns this
  /// rank's rows of it (within dfull).
  float* reduce_input_grad(float* dfull);
  void all_reduce_sum(float* x, size_t n);

  comm::Communicator* comm_;
  bool sp_flag_;  // as asked for (the model sizes its buffers by it)
  bool sp_;       // in effect: asked for and TP > 1
  int size_, rank_;
};

/// The operators of a TP group: the plain ones' results at TP = 1.
std::unique_ptr<model::Operators> make_operators(comm::Communicator* tp, bool sequence_parallel);

}  // namespace braid::parallel::tensor
