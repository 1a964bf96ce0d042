#include "braid/parallel/tensor/operators.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu/crossentropy.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/encoder.h"
#include "braid/kernels/cpu/matmul.h"

namespace braid::parallel::tensor {

namespace k = braid::kernels;

TensorParallelOperators::TensorParallelOperators(comm::Communicator* comm, bool sequence_parallel)
    : comm_(comm), sp_flag_(sequence_parallel), size_(comm ? comm->size() : 1), rank_(comm ? comm->rank() : 0) {
  sp_ = sequence_parallel && size_ > 1;
}

std::unique_ptr<model::Operators> make_operators(comm::Communicator* tp, bool sequence_parallel) {
  return std::make_unique<TensorParallelOperators>(tp, sequence_parallel);
}

void TensorParallelOperators::bind(const model::OperatorWorkspace& ws) {
  BRAID_CHECK(!sp_ || ws.gather, "sequence parallelism needs a gather buffer");
  BRAID_CHECK(size_ == 1 || ws.loss_stats, "the vocabulary-parallel loss needs its statistics buffer");
  Operators::bind(ws);
}

void TensorParallelOperators::set_batch(int64_t B, int64_t T) {
  BRAID_CHECK(!sp_ || (B * T) % size_ == 0, "tensor parallel: ", B * T, " token rows do not split over TP=", size_);
  Operators::set_batch(B, T);
  rows_ = sp_ ? BT_ / size_ : BT_;
  row0_ = sp_ ? rank_ * rows_ : 0;
}

const float* TensorParallelOperators::gather_rows(const float* local) {
  if (!sp_) return local;
  comm_->all_gather(local, ws_.gather, static_cast<size_t>(rows_ * ws_.C), DType::f32);
  return ws_.gather;
}

const void* TensorParallelOperators::gather_operand(const void* local) {
  if (!sp_) return local;
  comm_->all_gather(local, ws_.gather, static_cast<size_t>(rows_ * ws_.C), ws_.operands);
  return ws_.gather;
}

void TensorParallelOperators::reduce_rows(float* partial, float* out) {
  const size_t local = static_cast<size_t>(rows_ * ws_.C);
  if (sp_) {
    comm_->reduce_scatter(partial, partial + rank_ * local, local, DType::f32, comm::ReduceOp::sum);
    std::memcpy(out, partial + rank_ * local, local * sizeof(float));
    return;
  }
  all_reduce_sum(partial, local);
  if (out != partial) std::memcpy(out, partial, local * sizeof(float));
}

float* TensorParallelOperators::reduce_input_grad(float* dfull) {
  if (!sp_) {
    all_reduce_sum(dfull, static_cast<size_t>(BT_ * ws_.C));
    return dfull;
  }
  const size_t local = static_cast<size_t>(rows_ * ws_.C);
  comm_->reduce_scatter(dfull, dfull + rank_ * local, local, DType::f32, comm::ReduceOp::sum);
  return dfull + rank_ * local;
}

void TensorParallelOperators::all_reduce_sum(float* x, size_t n) {
  if (size_ > 1) comm_->all_reduce(x, x, n, DType::f32, comm::ReduceOp::sum);
}

void TensorParallelOperators::sum_replicated_grads(float* g, size_t n) { all_reduce_sum(g, n); }

void TensorParallelOperators::column_forward(float* out, const void* in, const void* W, const float* b, int64_t K,
                                             int64_t Nl) {
  Operators::column_forward(out, gather_operand(in), W, b, K, Nl);
}

void TensorParallelOperators::row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl,
                                          int64_t N) {
  if (size_ == 1) {
    Operators::row_forward(out, in, W, b, Kl, N);
    return;
  }
  // The bias is added once, after the sum over TP.
  float* partial = sp_ ? ws_.gather : out;
  k::matmul_forward_typed(partial, in, W, ws_.operands, nullptr, BT_, Kl, N);
  reduce_rows(partial, out);
  if (b) k::bias_forward(out, b, rows_, N);  // a model without biases passes none
}

float* TensorParallelOperators::column_backward(float* din_full, float* dW, float* db, const void* dout,
                                                const void* in, const void* W, int64_t K, int64_t Nl) {
  Operators::column_backward(din_full, dW, db, dout, gather_operand(in), W, K, Nl);
  return reduce_input_grad(din_full);
}

void TensorParallelOperators::column_weight_grad(float* dW, const void* dout, const void* in, int64_t K,
                                                 int64_t Nl) {
  Operators::column_weight_grad(dW, dout, gather_operand(in), K, Nl);
}

void TensorParallelOperators::row_backward(float* din, float* dW, float* db, const void* dout_local,
                                           const void* in, const void* W, int64_t Kl, int64_t N) {
  Operators::row_backward(din, dW, db, gather_operand(dout_local), in, W, Kl, N);
}

void TensorParallelOperators::row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl,
                                              int64_t N) {
  Operators::row_weight_grad(dW, gather_operand(dout_local), in, Kl, N);
}

void TensorParallelOperators::embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                                const float* wpe, int64_t Vp) {
  if (size_ == 1) {
    Operators::embedding_forward(out, tokens, wte, wpe, Vp);
    return;
  }
  // Each rank looks up its vocabulary rows; the sum over TP is exact (one
  // non-zero term per element); then the replicated positions.
  const int64_t Vpl = Vp / size_;
  float* partial = sp_ ? ws_.gather : out;
  k::embedding_lookup_range(partial, tokens, wte, rank_ * Vpl, Vpl, BT_, ws_.C);
  reduce_rows(partial, out);
  add_positions(out, wpe);
}

void TensorParallelOperators::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                                 const int32_t* tokens, int64_t Vp) {
  if (size_ == 1) {
    Operators::embedding_backward(dwte, dwpe, dout, tokens, Vp);
    return;
  }
  const int64_t Vpl = Vp / size_;
  position_grads(dwpe, dout);
  k::embedding_backward_range(dwte, gather_rows(dout), tokens, rank_ * Vpl, Vpl, BT_, ws_.C);
}

void TensorParallelOperators::cross_entropy_forward(float* losses, float* lse, const void* logits,
                                                    const int32_t* targets, int64_t V, int64_t Vp) {
  if (size_ == 1) {
    Operators::cross_entropy_forward(losses, lse, logits, targets, V, Vp);
    return;
  }
  // Max over TP, then the sums of exp and the target's logit over TP.
  const int64_t Vpl = Vp / size_, vstart = rank_ * Vpl, Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  float *mx = ws_.loss_stats, *sum = mx + BT_, *tgt = mx + 2 * BT_;
  k::vocab_parallel_max(mx, logits, ws_.operands, BT_, Vl, Vpl);
  comm_->all_reduce(mx, mx, static_cast<size_t>(BT_), DType::f32, comm::ReduceOp::max);
  k::vocab_parallel_sumexp(sum, tgt, logits, ws_.operands, mx, targets, vstart, BT_, Vl, Vpl);
  if (!targets) std::memset(tgt, 0, static_cast<size_t>(BT_) * sizeof(float));
  all_reduce_sum(sum, static_cast<size_t>(2 * BT_));
  for (int64_t i = 0; i < BT_; ++i) {
    lse[i] = mx[i] + std::log(sum[i]);
    losses[i] = lse[i] - tgt[i];
  }
}

void TensorParallelOperators::cross_entropy_backward(float* dlogits, const void* logits, const float* lse,
                                                     const int32_t* targets, float scale, int64_t V, int64_t Vp) {
  if (size_ == 1) {
    Operators::cross_entropy_backward(dlogits, logits, lse, targets, scale, V, Vp);
    return;
  }
  const int64_t Vpl = Vp / size_, vstart = rank_ * Vpl, Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  k::vocab_parallel_crossentropy_backward(dlogits, logits, ws_.operands, lse, targets, vstart, scale, BT_, Vl,
                                          Vpl);
}

}  // namespace braid::parallel::tensor
