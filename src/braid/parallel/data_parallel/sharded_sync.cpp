#include "braid/parallel/data_parallel/sharded_sync.h"

#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/registry.h"

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


// ---- the modes this class runs ----

namespace {

std::unique_ptr<GradSync> make_sharded(const GradSyncInputs& in) {
  return std::make_unique<ShardedSync>(in.cfg, in.sharded, in.shard, in.replicate, in.dp, in.world, in.ledger);
}

// The engine lays out the stage's units itself (padded per unit): its element count
// replaces the model's.
SyncMemory plan_sharded(const SyncPlanInputs& in) {
  const int S = in.shard_degree;
  const ShardedEngine::Plan e = ShardedEngine::plan(in.cfg, in.sharded, S, in.dp_rank % S);
  SyncMemory m;
  m.bytes = e.bytes;
  m.optimizer_elems = e.state_elems;
  m.num_params = model::unit_bounds(in.cfg, in.sharded.tp, in.sharded.pipeline).back();
  return m;
}

bool fsdp_with_shard_groups(const DataParallelFlags& f) {
  return f.fsdp && f.fsdp_shard_size > 0 && f.fsdp_shard_size < f.dp;
}

constexpr Sharding kAllSharded{Holding::shard, Holding::shard, Holding::shard};

}  // namespace

extern const DataParallelMode kZero2Mode{
    "zero2", "ZeRO-2: gradients and AdamW moments sharded over DP, parameters replicated", 2,
    {Holding::replica, Holding::shard, Holding::shard}, true, false, false, false,
    [](const DataParallelFlags& f) { return f.zero == 2; }, no_mode_rules, shard_over_dp, make_sharded, plan_sharded};

extern const DataParallelMode kZero3Mode{
    "zero3", "ZeRO-3: parameters, gradients and AdamW moments sharded per tensor, gathered per layer", 3,
    kAllSharded, true, false, false, false, [](const DataParallelFlags& f) { return f.zero == 3; }, no_mode_rules,
    shard_over_dp, make_sharded, plan_sharded};

extern const DataParallelMode kFsdpMode{
    "fsdp", "FSDP: every model state sharded with one flat parameter per unit", 3, kAllSharded, true, true, false,
    false, [](const DataParallelFlags& f) { return f.fsdp; }, no_mode_rules, shard_over_dp, make_sharded,
    plan_sharded};

extern const DataParallelMode kHsdpMode{
    "hsdp", "HSDP: FSDP within groups of --fsdp-shard-size DP ranks, replicated across the groups", 3, kAllSharded,
    true, true, true, false, fsdp_with_shard_groups, no_mode_rules,
    [](const DataParallelFlags& f) { return f.fsdp_shard_size; }, make_sharded, plan_sharded};

}  // namespace braid::parallel
