#include "braid/parallel/data_parallel/bucketed_sync.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/hash.h"
#include "braid/model/gpt.h"

namespace braid::parallel {

BucketedSync::BucketedSync(const BucketedConfig& c, comm::Communicator& dp, comm::Communicator& world,
                           MemoryLedger* ledger)
    : c_(c), dp_(dp), world_(world), ledger_(ledger) {
  BRAID_CONFIG_CHECK(c.stage == 0 || c.stage == 1, "bucketed gradient sync runs ZeRO stage 0 or 1, not ", c.stage);
}

BucketedSync::~BucketedSync() = default;

void BucketedSync::attach(model::GPT& model) {
  FlatBufferSync::attach(model);
  const size_t n = model.num_params();
  const BucketReduce mode = c_.stage == 1 ? BucketReduce::reduce_scatter : BucketReduce::all_reduce;
  buckets_ = std::make_unique<GradBuckets>(dp_, model.params(), model.grads(), n, c_.bucket_bytes, c_.overlap,
                                           c_.algo, mode, ledger_);
  for (const auto& s : buckets_->owned()) owned_.push_back({s.offset, s.len, s.shard});
}

void BucketedSync::begin_step(int64_t) {
  model_->zero_grad();
  reduced_ = false;
}

GradReadyHook BucketedSync::backward_hook(bool last) {
  // Only the backward that ends accumulation releases buckets: one sync per step.
  if (!last) return {};
  buckets_->begin_sync();
  return [this](size_t lo, size_t hi) { buckets_->on_ready(lo, hi); };
}

void BucketedSync::reduce_accumulated(comm::Communicator* tied) {
  // The tied embedding's copies are summed first, then averaged over DP with the rest.
  if (tied) tied->all_reduce(model_->grads(), model_->grads(), model_->unit_end(0), DType::f32, comm::ReduceOp::sum);
  backward_hook(true)(0, model_->num_params());
  finish(0.f);
  reduced_ = true;
}

float BucketedSync::finish(float local_loss) {
  if (!reduced_) buckets_->finish_sync();
  reduced_ = true;
  float loss = local_loss;
  if (dp_.size() > 1) dp_.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
  return loss;
}

void BucketedSync::after_update(StepScalars&) {
  buckets_->gather_params();
}

size_t BucketedSync::state_elems() const {
  size_t n = 0;
  for (const auto& r : owned_) n = std::max(n, r.state + r.len);
  return n;
}

bool BucketedSync::counts_in_norm() const {
  // ZeRO-1: every rank owns distinct elements; DDP replicas are equal, DP rank 0 counts.
  return c_.stage == 1 || dp_.rank() == 0;
}

void BucketedSync::assemble_state(const float* state, float* full) {
  FlatBufferSync::assemble_state(state, full);
  const size_t n = model_->num_params();
  // ZeRO-1: each element has one owner, so the sum over DP is exact.
  if (c_.stage == 1 && dp_.size() > 1) dp_.all_reduce(full, full, n, DType::f32, comm::ReduceOp::sum);
}

}  // namespace braid::parallel
