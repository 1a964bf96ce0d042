#include "braid/parallel/tensor/layers.h"

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

int TensorParallel::size() const { return comm ? comm->size() : 1; }
int TensorParallel::rank() const { return comm ? comm->rank() : 0; }

TensorParallelLayers::TensorParallelLayers(const TensorParallel& tp, int64_t C, float* gather, float* matmul_scratch)
    : comm_(tp.comm), sp_(tp.sequence_parallel && tp.size() > 1), size_(tp.size()), rank_(tp.rank()), C_(C),
      gather_(gather), mm_scratch_(matmul_scratch) {
  BRAID_CHECK(!sp_ || gather_, "sequence parallelism needs a gather buffer");
}

void TensorParallelLayers::set_rows(int64_t BT) {
  BRAID_CHECK(!sp_ || BT % size_ == 0, "tensor parallel: ", BT, " token rows do not split over TP=", size_);
  BT_ = BT;
  rows_ = sp_ ? BT / size_ : BT;
  row0_ = sp_ ? rank_ * rows_ : 0;
}

const float* TensorParallelLayers::gather_rows(const float* local) {
  if (!sp_) return local;
  comm_->all_gather(local, gather_, static_cast<size_t>(rows_ * C_), DType::f32);
  return gather_;
}

const void* TensorParallelLayers::gather_operand(const void* local) {
  if (!sp_) return local;
  comm_->all_gather(local, gather_, static_cast<size_t>(rows_ * C_), op_);
  return gather_;
}

void TensorParallelLayers::reduce_rows(float* partial, float* out) {
  const size_t local = static_cast<size_t>(rows_ * C_);
  if (sp_) {
    comm_->reduce_scatter(partial, partial + rank_ * local, local, DType::f32, comm::ReduceOp::sum);
    std::memcpy(out, partial + rank_ * local, local * sizeof(float));
    return;
  }
  all_reduce_sum(partial, local);
  if (out != partial) std::memcpy(out, partial, local * sizeof(float));
}

float* TensorParallelLayers::reduce_input_grad(float* dfull) {
  if (!sp_) {
    all_reduce_sum(dfull, static_cast<size_t>(BT_ * C_));
    return dfull;
  }
  const size_t local = static_cast<size_t>(rows_ * C_);
  comm_->reduce_scatter(dfull, dfull + rank_ * local, local, DType::f32, comm::ReduceOp::sum);
  return dfull + rank_ * local;
}

void TensorParallelLayers::all_reduce_sum(float* x, size_t n) {
  if (size_ > 1) comm_->all_reduce(x, x, n, DType::f32, comm::ReduceOp::sum);
}

void TensorParallelLayers::column_forward(float* out, const void* in, const void* W, const float* b, int64_t K,
                                          int64_t Nl) {
  k::matmul_forward_typed(out, gather_operand(in), W, op_, b, BT_, K, Nl);
}

void TensorParallelLayers::row_forward(float* out, const void* in, const void* W, const float* b, int64_t Kl,
                                       int64_t N) {
  if (size_ == 1) {
    k::matmul_forward_typed(out, in, W, op_, b, BT_, Kl, N);
    return;
  }
  // The bias is added once, after the sum over TP.
  float* partial = sp_ ? gather_ : out;
  k::matmul_forward_typed(partial, in, W, op_, nullptr, BT_, Kl, N);
  reduce_rows(partial, out);
  k::bias_forward(out, b, rows_, N);
}

float* TensorParallelLayers::column_backward(float* din_full, float* dW, float* db, const void* dout,
                                             const void* in, const void* W, int64_t K, int64_t Nl) {
  k::matmul_backward_typed(din_full, dW, db, dout, gather_operand(in), W, op_, BT_, K, Nl, mm_scratch_);
  return reduce_input_grad(din_full);
}

void TensorParallelLayers::column_weight_grad(float* dW, const void* dout, const void* in, int64_t K, int64_t Nl) {
  k::matmul_backward_typed(nullptr, dW, nullptr, dout, gather_operand(in), nullptr, op_, BT_, K, Nl, mm_scratch_);
}

void TensorParallelLayers::row_backward(float* din, float* dW, float* db, const void* dout_local, const void* in,
                                        const void* W, int64_t Kl, int64_t N) {
  k::matmul_backward_typed(din, dW, db, gather_operand(dout_local), in, W, op_, BT_, Kl, N, mm_scratch_);
}

void TensorParallelLayers::row_weight_grad(float* dW, const void* dout_local, const void* in, int64_t Kl,
                                           int64_t N) {
  k::matmul_backward_typed(nullptr, dW, nullptr, gather_operand(dout_local), in, nullptr, op_, BT_, Kl, N,
                           mm_scratch_);
}

void TensorParallelLayers::embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                             int64_t B, int64_t T, int64_t Vp) {
  if (size_ == 1) {
    k::encoder_forward(out, tokens, wte, wpe, B, T, C_);
    return;
  }
  // Each rank looks up its vocabulary rows; the sum over TP is exact (one
  // non-zero term per element); then the replicated positions.
  const int64_t Vpl = Vp / size_;
  float* partial = sp_ ? gather_ : out;
  k::embedding_lookup_range(partial, tokens, wte, rank_ * Vpl, Vpl, BT_, C_);
  reduce_rows(partial, out);
  k::position_forward(out, wpe, row0_, rows_, T, C_);
}

void TensorParallelLayers::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                              int64_t B, int64_t T, int64_t Vp) {
  if (size_ == 1) {
    k::encoder_backward(dwte, dwpe, dout, tokens, B, T, C_);
    return;
  }
  const int64_t Vpl = Vp / size_;
  k::position_backward(dwpe, dout, row0_, rows_, T, C_);
  k::embedding_backward_range(dwte, gather_rows(dout), tokens, rank_ * Vpl, Vpl, BT_, C_);
}

void TensorParallelLayers::cross_entropy_forward(float* losses, float* lse, const void* logits,
                                                 const int32_t* targets, int64_t V, int64_t Vp, float* stats) {
  if (size_ == 1) {
    k::softmax_crossentropy_forward(losses, lse, nullptr, logits, op_, targets, BT_, V, Vp);
    return;
  }
  // Max over TP, then the sums of exp and the target's logit over TP.
  const int64_t Vpl = Vp / size_, vstart = rank_ * Vpl, Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  float *mx = stats, *sum = stats + BT_, *tgt = stats + 2 * BT_;
  k::vocab_parallel_max(mx, logits, op_, BT_, Vl, Vpl);
  comm_->all_reduce(mx, mx, static_cast<size_t>(BT_), DType::f32, comm::ReduceOp::max);
  k::vocab_parallel_sumexp(sum, tgt, logits, op_, mx, targets, vstart, BT_, Vl, Vpl);
  if (!targets) std::memset(tgt, 0, static_cast<size_t>(BT_) * sizeof(float));
  all_reduce_sum(sum, static_cast<size_t>(2 * BT_));
  for (int64_t i = 0; i < BT_; ++i) {
    lse[i] = mx[i] + std::log(sum[i]);
    losses[i] = lse[i] - tgt[i];
  }
}

void TensorParallelLayers::cross_entropy_backward(float* dlogits, const void* logits, const float* lse,
                                                  const int32_t* targets, float scale, int64_t V, int64_t Vp) {
  if (size_ == 1) {
    k::softmax_crossentropy_backward(dlogits, logits, op_, lse, targets, scale, BT_, V, Vp);
    return;
  }
  const int64_t Vpl = Vp / size_, vstart = rank_ * Vpl, Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  k::vocab_parallel_crossentropy_backward(dlogits, logits, op_, lse, targets, vstart, scale, BT_, Vl, Vpl);
}

}  // namespace braid::parallel::tensor
