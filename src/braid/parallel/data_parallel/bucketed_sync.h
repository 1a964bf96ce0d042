// DDP (stage 0: every bucket all-reduced) and ZeRO-1 (stage 1: every bucket
// reduce-scattered, the parameters all-gathered after the update), bucket by
// bucket while backward runs (GradBuckets), in any precision: in fp32 over the
// model's own flat buffers (the parameters are the master weights), in bf16 /
// fp16 over a HalfPrecisionStorage (compute copies in the compute dtype,
// gradients accumulated and reduced in the reduce dtype: f32 by default, the
// compute dtype when opted in; f32 master weights of the owned elements).
#pragma once
#include <memory>

#include "braid/core/memory.h"
#include "braid/model/config.h"
#include "braid/parallel/data_parallel/grad_buckets.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/group_buffer.h"
#include "braid/parallel/data_parallel/half_storage.h"

namespace braid::parallel {

struct BucketedConfig {
  int stage = 0;  // 0: DDP, 1: ZeRO-1
  size_t bucket_bytes = 4u << 20;
  bool overlap = true;  // launch buckets while backward runs
  comm::Algorithm algo = comm::Algorithm::ring;
  // Gradients in memory every DP rank maps (Communicator::alloc_shared), so their
  // reduction runs zero-copy when the DP group shares a node.
  bool zero_copy = true;
  DType compute = DType::f32;  // bf16 / fp16: mixed precision
  DType reduce = DType::f32;   // gradients' accumulation and reduction: f32 or `compute`
  // The layout (half precision: the storage's units).
  model::GPTConfig model;
  int tp = 1;
  model::PipelineStage pipeline;
  // A pipeline stage holding a copy of the tied embedding (the first or the
  // last): unit 0 is bucketed apart, the same on both stages, so the two
  // copies' DP reductions round alike and the copies stay bitwise equal.
  bool tied_embedding = false;
};

class BucketedSync final : public FlatBufferSync {
 public:
  /// What rank `rank` of a DP group of `world` ranks allocates outside the
  /// model for a model of n elements (optimizer elements, bytes by category).
  struct Plan {
    size_t state_elems = 0;
    std::array<size_t, kNumMemCategories> bytes{};
  };
  static Plan plan(const BucketedConfig& c, int world, int rank);

  /// dp: the data-parallel group; world: every rank (the norm's group). Both
  /// must outlive this object. Throws ConfigError for a stage other than 0, 1.
  BucketedSync(const BucketedConfig& c, comm::Communicator& dp, comm::Communicator& world, MemoryLedger* ledger);
  ~BucketedSync() override;

  model::UnitStorage* storage() override { return half_.get(); }
  void attach(model::GPT& model) override;
  void set_span_sink(SpanSink* sink) override {
    if (buckets_) buckets_->set_span_sink(sink);
  }
  void init_params(model::GPT& model, uint64_t seed) override;
  void begin_step(int64_t step) override;
  GradReadyHook backward_hook(bool last) override;
  void reduce_accumulated(comm::Communicator* tied) override;
  float finish(float local_loss) override;
  void after_update(StepScalars& s) override;

  const std::vector<OwnedRange>& owned() const override { return owned_; }
  size_t state_elems() const override;
  bool counts_in_norm() const override;
  std::string transport() const override;
  comm::Communicator* norm_group() override { return &world_; }
  const void* grad(const OwnedRange& r) const override;
  DType grad_dtype() const override { return c_.reduce; }
  float* master(const OwnedRange& r) override;
  uint16_t* bf16_compute(const OwnedRange& r) override;

  const float* full_params(std::vector<float>& scratch) override;
  void assemble_state(const float* state, float* full) override;
  void load_params(const FlatReader& read) override;
  const float* acquire_unit_params(int u) override;
  void release_unit_params(int u) override;
  uint64_t hash_params() override;
  void inject_inf_once() override;

 private:
  size_t num_params() const;
  /// Where buckets are cut (unit 0's end on a stage with a tied copy, else 0).
  static size_t bucket_cut(const BucketedConfig& c, const std::vector<size_t>& bounds);
  /// ZeRO-1: full (num_params) holds this rank's owned elements, zero elsewhere;
  /// sums it over DP (one owner per element: exact). DDP: nothing to do.
  void sum_owned(float* full);

  BucketedConfig c_;
  comm::Communicator& dp_;
  comm::Communicator& world_;
  MemoryLedger* ledger_;
  std::unique_ptr<HalfPrecisionStorage> half_;  // bf16 / fp16 only
  std::unique_ptr<GradBuckets> buckets_;
  size_t cut_ = 0;  // bucket_cut of the layout
  std::vector<OwnedRange> owned_;
  SharedBytes grad_bytes_;  // the gradient buffer, shared with the DP group or not
  bool reduced_ = false;  // reduce_accumulated already waited for this step's reductions
};

}  // namespace braid::parallel
