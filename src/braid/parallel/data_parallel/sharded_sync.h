// ZeRO-2/3, FSDP and HSDP in any precision: the sharding engine is the
// model's storage (parameters gathered and gradients reduce-scattered unit by
// unit as forward and backward reach them) and this class drives its step.
#pragma once
#include <memory>

#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/sharded.h"

namespace braid::parallel {

class ShardedSync final : public GradSync {
 public:
  /// shard: the group the states are sharded over; replicate: HSDP's group
  /// across shard groups (or null); dp: the whole DP group (the loss average);
  /// world: every rank (the norm's group). All must outlive this object.
  ShardedSync(const model::GPTConfig& cfg, const ShardedConfig& sc, comm::Communicator& shard,
              comm::Communicator* replicate, comm::Communicator& dp, comm::Communicator& world,
              MemoryLedger* ledger);
  ~ShardedSync() override;

  model::UnitStorage* storage() override { return &engine_; }
  void attach(model::GPT& model) override { model_ = &model; }
  void init_params(model::GPT& model, uint64_t seed) override { engine_.init_weights(model, seed); }
  void begin_step(int64_t step) override;
  GradReadyHook backward_hook(bool last) override;
  void reduce_accumulated(comm::Communicator* tied) override;
  float finish(float local_loss) override;
  void after_update(StepScalars& s) override { engine_.after_update(); }

  const std::vector<OwnedRange>& owned() const override { return owned_; }
  size_t state_elems() const override { return engine_.state_elems(); }
  bool counts_in_norm() const override;
  std::string transport() const override { return engine_.transport(); }
  comm::Communicator* norm_group() override { return &world_; }
  const void* grad(const OwnedRange& r) const override;
  DType grad_dtype() const override { return engine_.grad_dtype(); }
  float* master(const OwnedRange& r) override;
  uint16_t* bf16_compute(const OwnedRange& r) override { return engine_.bf16_compute({r.offset, r.len, r.state}); }

  const float* full_params(std::vector<float>& scratch) override;
  void assemble_state(const float* state, float* full) override { engine_.assemble(state, full); }
  void load_params(const FlatReader& read) override { engine_.load_master(read); }
  const float* acquire_unit_params(int u) override { return engine_.acquire_params(u); }
  void release_unit_params(int u) override { engine_.release_params(u); }
  uint64_t hash_params() override { return engine_.hash_compute_params(); }
  bool params_sharded() const override { return engine_.config().stage == 3; }
  void set_span_sink(SpanSink* sink) override { engine_.set_span_sink(sink); }
  void inject_inf_once() override { engine_.inject_inf_once(); }

  ShardedEngine& engine() { return engine_; }

 private:
  ShardedEngine engine_;
  comm::Communicator& dp_;
  comm::Communicator& world_;
  comm::Communicator* replicate_;
  model::GPT* model_ = nullptr;
  std::vector<OwnedRange> owned_;
  bool reduced_ = false;
};

}  // namespace braid::parallel
