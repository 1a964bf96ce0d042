#include "braid/parallel/data_parallel/sharded_sync.h"

#include "braid/model/gpt.h"

namespace braid::parallel {

ShardedSync::ShardedSync(const model::GPTConfig& cfg, const ShardedConfig& sc, comm::Communicator& shard,
                         comm::Communicator* replicate, comm::Communicator& dp, comm::Communicator& world,
                         MemoryLedger* ledger)
    : engine_(cfg, sc, shard, replicate, ledger), dp_(dp), world_(world), replicate_(replicate) {
  for (const auto& s : engine_.owned()) owned_.push_back({s.offset, s.len, s.shard});
}

ShardedSync::~ShardedSync() = default;

void ShardedSync::begin_step(int64_t) {
  engine_.begin_step();
  reduced_ = false;
}

GradReadyHook ShardedSync::backward_hook(bool) {
  return {};  // the engine reduce-scatters each unit in every backward, as it finishes
}

void ShardedSync::reduce_accumulated(comm::Communicator* tied) {
  // The DP reduction first (in every backward already); the tied embedding's
  // copies then sum the reduced gradients.
  engine_.finish_grads();
  reduced_ = true;
  if (tied) engine_.sum_unit_grads(0, *tied);
}

float ShardedSync::finish(float local_loss) {
  if (!reduced_) engine_.finish_grads();
  reduced_ = true;
  float loss = local_loss;
  if (dp_.size() > 1) dp_.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
  return loss;
}

bool ShardedSync::counts_in_norm() const {
  // Shards own distinct elements; HSDP replicas of a shard count once.
  return !replicate_ || replicate_->rank() == 0;
}

const void* ShardedSync::grad(const OwnedRange& r) const { return engine_.grad({r.offset, r.len, r.state}); }

float* ShardedSync::master(const OwnedRange& r) { return engine_.master({r.offset, r.len, r.state}); }

const float* ShardedSync::full_params(std::vector<float>& scratch) {
  scratch.assign(model_->num_params(), 0.f);
  engine_.gather_master(scratch.data());
  return scratch.data();
}

}  // namespace braid::parallel
