// The parallel layout of a job, resolved from the options and validated once
// (after torchtitan's ParallelDims): every degree, the data-parallel mode, the
// precision, the pipeline schedule and the micro-batching. `braid train`,
// `braid plan` and `braid schedule` all read it; nothing else derives a degree.
// ParallelContext holds the communicators of one rank's groups.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/dtype.h"
#include "braid/model/gpt.h"
#include "braid/parallel/pipeline/check.h"
#include "braid/parallel/data_parallel/bucketed_sync.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/sharded.h"
#include "braid/parallel/topology.h"
#include "braid/train/options.h"

namespace braid::train {

/// How the data-parallel group keeps the model states (ZeRO stages after
/// Rajbhandari et al. 2020; FSDP and HSDP after Zhao et al. 2023).
enum class DataParallelMode : uint8_t { ddp, zero1, zero2, zero3, fsdp, hsdp, parameter_server };
const char* data_parallel_mode_name(DataParallelMode m);

/// The data-parallel strand.
struct DataParallelPlan {
  int degree = 1;  // DP ranks (the workers under a parameter server)
  DataParallelMode mode = DataParallelMode::ddp;
  int zero_stage = 0;    // sharded model states: 0 none, 1 moments, 2 + gradients, 3 + parameters
  int shard_degree = 1;  // ranks one copy of the sharded states spans: the DP degree, or the HSDP group
  bool ps_async = false;
  int64_t staleness = 0;
  bool parameter_server() const { return mode == DataParallelMode::parameter_server; }
};

/// The tensor-parallel strand (Shoeybi et al. 2019; sequence parallelism:
/// Korthikanti et al. 2022).
struct TensorParallelPlan {
  int degree = 1;
  bool sequence_parallel = false;
};

/// The pipeline strand: what `braid schedule` takes on its own.
struct PipelinePlan {
  int stages = 1;          // P
  int virtual_stages = 1;  // v: model chunks per pipeline rank (interleaved, zb-v)
  int micro_batches = 1;   // m per optimizer step and pipeline
  const parallel::ScheduleDef* schedule = &parallel::find_schedule("1f1b");  // from parallel::schedules()
  std::vector<int64_t> layers;  // per virtual stage (P x v entries); one entry without a pipeline

  /// Every rank's program, checked on its tables (throws braid::Error on a
  /// deadlock, ConfigError on an impossible P, m, v); `stats` (optional)
  /// receives the simulation's findings.
  std::vector<parallel::StageProgram> programs(parallel::ScheduleStats* stats = nullptr) const;
  /// The layers and activation slots of pipeline rank pp_rank: each chunk's
  /// slots are the most micro-batches the schedule's simulation keeps alive.
  model::PipelineStage stage(int pp_rank) const;
  /// The same from a simulation already run (programs(&stats)).
  model::PipelineStage stage(int pp_rank, const parallel::ScheduleStats& stats) const;
  /// Which virtual stage each rank's chunks hold (the schedule's placement).
  parallel::StageMap map() const { return parallel::StageMap(*schedule, stages, virtual_stages); }
  /// The pipeline ranks of the first and the last virtual stage (the
  /// embedding; the head and the loss): 0 and P-1 unless the schedule folds.
  int first_rank() const { return map().rank_of(0); }
  int last_rank() const { return map().rank_of(stages * virtual_stages - 1); }
};

/// The resolved layout of a job of `world` ranks.
struct ParallelPlan {
  int world = 1;
  DataParallelPlan dp;
  TensorParallelPlan tp;
  PipelinePlan pp;
  DType compute = DType::f32;  // --precision: compute copies (master weights stay f32)
  DType reduce = DType::f32;   // --reduce-dtype: gradient accumulation and reduction
  bool half_matmuls = true;    // --matmul-precision half: matmul operands stored in `compute`
  bool fp32_residual = false;  // --fp32-residual: the residual stream stays f32
  /// The model's precision: compute, the dtype its matmul operands take here, the residual's.
  model::Precision precision() const {
    model::Precision p = model::Precision::of(compute, half_matmuls);
    p.fp32_residual = fp32_residual;
    return p;
  }
  model::Recompute recompute = model::Recompute::none;
  int64_t global_batch = 1;  // sequences per optimizer step over all DP ranks
  int64_t micro_batch = 1;   // sequences per forward/backward on one rank
  int64_t seq_len = 1;

  /// True when the sharding engine holds the model states: ZeRO-2/3, FSDP,
  /// HSDP (DDP and ZeRO-1 run through the gradient buckets).
  bool sharded_engine() const;
  bool hsdp() const { return dp.mode == DataParallelMode::hsdp; }
  /// TP fastest, then DP, then PP (a parameter server's world is not a grid:
  /// rank 0 serves, ranks 1.. are DP ranks 0..).
  parallel::RankGrid grid() const;
  /// This rank's DP coordinate (-1 for a parameter server), TP and PP coordinates.
  int dp_rank(int rank) const;
  int tp_rank(int rank) const;
  int pp_rank(int rank) const;
  /// Ranks that compute a forward (all but a parameter server).
  int compute_ranks() const { return dp.degree * tp.degree * pp.stages; }
  /// "dp=2 x tp=2+sp x pp=2 (1f1b), zero=1, bf16" for start-up lines.
  std::string describe() const;
};

/// The model config of `opt`: the preset with the size overrides applied.
/// Throws ConfigError for an unknown preset or invalid sizes.
model::GPTConfig model_config(const TrainOptions& opt);

/// Validates options against the world size and model, strand by strand;
/// throws ConfigError with the values and the fix. resolve_plan calls it.
void validate_options(const TrainOptions& opt, int world_size, const model::GPTConfig& cfg);

/// Resolves `opt` for a job of world_size ranks training `cfg`: fills the
/// model-dependent defaults into `opt` (seq_len 0 -> min(128, block_size);
/// --micro-batches m -> micro_batch = batch / (dp x m)), validates every strand
/// and returns the plan. Throws ConfigError naming the values and the fix.
ParallelPlan resolve_plan(TrainOptions& opt, int world_size, const model::GPTConfig& cfg);

/// Bytes of one activation (or its gradient) crossing a pipeline stage
/// boundary: (rows, n_embd) f32, rows = micro_batch x seq_len (/ TP under
/// sequence parallelism).
size_t boundary_bytes(const ParallelPlan& plan, const model::GPTConfig& cfg);

/// The gradient buckets' settings (DDP, ZeRO-1) for this plan on a rank holding `stage`.
parallel::BucketedConfig bucketed_config(const ParallelPlan& plan, const model::GPTConfig& cfg,
                                         const model::PipelineStage& stage, const TrainOptions& opt);
/// The sharding engine's settings for this plan on a rank holding `stage`
/// (zero_copy: gather and reduce through memory the shard group shares).
parallel::ShardedConfig sharded_config(const ParallelPlan& plan, const model::PipelineStage& stage,
                                       comm::Algorithm algo = comm::Algorithm::ring, bool zero_copy = true);

class ParallelContext;

/// The gradient sync the plan's data-parallel mode runs: BucketedSync (DDP,
/// ZeRO-1), ShardedSync (ZeRO-2/3, FSDP, HSDP; builds the sharding engine for
/// pipeline stage `stage`) or ParameterServerSync, all in the plan's
/// precision. Call before building the model over its storage().
std::unique_ptr<parallel::GradSync> make_grad_sync(const ParallelPlan& plan, ParallelContext& ctx,
                                                   const model::GPTConfig& cfg, const model::PipelineStage& stage,
                                                   const TrainOptions& opt, MemoryLedger* ledger);

/// The communicators of one rank's groups under a plan. Construction is
/// collective over the world (every rank builds its context together).
class ParallelContext {
 public:
  ParallelContext(const ParallelPlan& plan, comm::Communicator& world);
  ~ParallelContext();

  comm::Communicator& world() { return world_; }
  /// The DP group (the world when TP = PP = 1, and under a parameter server).
  comm::Communicator& dp() { return *dp_; }
  comm::Communicator* tp() { return tp_.get(); }    // null at TP = 1
  comm::Communicator* pp() { return pp_.get(); }    // null at PP = 1
  /// The ranks of the first and the last virtual stage (the tied embedding's
  /// copies); null at PP = 1, on the other ranks, and when one rank holds both.
  comm::Communicator* emb() { return emb_.get(); }
  /// The ranks the sharded states span: the DP group, or an HSDP shard group.
  comm::Communicator& shard() { return shard_ ? *shard_ : *dp_; }
  comm::Communicator* replicate() { return replicate_.get(); }  // HSDP: across shard groups
  int dp_rank() const { return dp_rank_; }  // -1 on a parameter server
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  /// Sends every collective of the world and of each group to `sink` (null: stop).
  void set_span_sink(const std::shared_ptr<SpanSink>& sink);
  /// Payload bytes over the world and every group of this rank.
  uint64_t bytes_sent() const;
  uint64_t bytes_received() const;

 private:
  comm::Communicator& world_;
  comm::Communicator* dp_;
  std::unique_ptr<comm::Communicator> tp_, dp_own_, pp_, emb_, shard_, replicate_;
  int dp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
};

}  // namespace braid::train
