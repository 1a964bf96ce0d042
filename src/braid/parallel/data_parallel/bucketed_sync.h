// DDP (stage 0: every bucket all-reduced) and ZeRO-1 (stage 1: every bucket
// reduce-scattered, the parameters all-gathered after the update) over the
// model's own f32 parameter and gradient buffers, bucket by bucket while
// backward runs (GradBuckets, by a flag).
#pragma once
#include <memory>

#include "braid/core/memory.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/grad_buckets.h"

namespace braid::parallel {

struct BucketedConfig {
  int stage = 0;  // 0: DDP, 1: ZeRO-1
  size_t bucket_bytes = 4u << 20;
  bool overlap = true;  // launch buckets while backward runs
  comm::Algorithm algo = comm::Algorithm::ring;
};

class BucketedSync final : public FlatBufferSync {
 public:
  /// dp: the data-parallel group; world: every rank (the norm's group). Both
  /// must outlive this object. Throws ConfigError for a stage other than 0, 1.
  BucketedSync(const BucketedConfig& c, comm::Communicator& dp, comm::Communicator& world, MemoryLedger* ledger);
  ~BucketedSync() override;

  void attach(model::GPT& model) override;
  void begin_step(int64_t step) override;
  GradReadyHook backward_hook(bool last) override;
  void reduce_accumulated(comm::Communicator* tied) override;
  float finish(float local_loss) override;
  void after_update(StepScalars& s) override;

  const std::vector<OwnedRange>& owned() const override { return owned_; }
  size_t state_elems() const override;
  bool counts_in_norm() const override;
  comm::Communicator* norm_group() override { return &world_; }

  void assemble_state(const float* state, float* full) override;

 private:
  BucketedConfig c_;
  comm::Communicator& dp_;
  comm::Communicator& world_;
  MemoryLedger* ledger_;
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<OwnedRange> owned_;
  bool reduced_ = false;  // reduce_accumulated already waited for this step's reductions
};

}  // namespace braid::parallel
