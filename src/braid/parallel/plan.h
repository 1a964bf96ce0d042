// The parallel layout of a job, resolved from the options and validated once
// (after torchtitan's ParallelDims): every degree, the data-parallel mode, the
// precision, the pipeline schedule, the micro-batching, and the rank placement
// (grid(): which ranks form each group). `braid train`, `braid plan` and
// `braid schedule` all read it; nothing else derives a degree or a placement,
// and nothing below the CLI reads the options. ParallelContext holds the
// communicators of one rank's groups.
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
#include "braid/parallel/data_parallel/registry.h"
#include "braid/parallel/data_parallel/sharded.h"
#include "braid/parallel/topology.h"
#include "braid/parallel/layout_options.h"

namespace braid::parallel {

/// The data-parallel strand.
struct DataParallelPlan {
  int degree = 1;  // DP ranks (the workers under a parameter server)
  const DataParallelMode* mode = &kDdpMode;  // how the group keeps the model states
  int zero_stage = 0;    // sharded model states: 0 none, 1 moments, 2 + gradients, 3 + parameters
  int shard_degree = 1;  // ranks one copy of the sharded states spans: the DP degree, or the HSDP group
  bool ps_async = false;
  int64_t staleness = 0;
  size_t bucket_bytes = size_t{4} << 20;  // --bucket-mb: gradient bucket size (DDP, ZeRO-1)
  bool overlap = true;                    // bucket reductions launched during the backward
  bool zero_copy = true;                  // through memory the DP ranks of a node share, where they can
  bool parameter_server() const { return mode->dedicated_server; }
};

/// The tensor-parallel strand (Shoeybi et al. 2019; sequence parallelism:
/// Korthikanti et al. 2022).
struct TensorParallelPlan {
  int degree = 1;
  bool sequence_parallel = false;
};

/// The context-parallel strand (Megatron-Core's context parallelism; ring
/// attention, Liu et al. 2023): each sequence split over `degree` ranks.
struct ContextParallelPlan {
  int degree = 1;
  std::string comm = "ring";  // --cp-comm
};

/// The pipeline strand: what `braid schedule` takes on its own.
struct PipelinePlan {
  int stages = 1;          // P
  int virtual_stages = 1;  // v: model chunks per pipeline rank (interleaved, zb-v)
  int micro_batches = 1;   // m per optimizer step and pipeline
  const parallel::ScheduleDef* schedule = &parallel::find_schedule("1f1b");  // from parallel::schedules()
  std::vector<int64_t> layers;  // per virtual stage (P x v entries); one entry without a pipeline
  /// The LM head is tied to wte: the last stage keeps a copy of the embedding
  /// unit, summed with the first stage's over their group (else it holds lm_head).
  bool tied_head = true;

  /// Every rank's program, checked on its tables (throws braid::Error on a
  /// deadlock, ConfigError on an impossible P, m, v); `stats` (optional)
  /// receives the simulation's findings.
  std::vector<StageProgram> programs(ScheduleStats* stats = nullptr) const;
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
  ContextParallelPlan cp;
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
  float dropout = 0.0f;  // embedding and residual dropout probability
  comm::Algorithm algo = comm::Algorithm::ring;  // --comm-algo: braid's collectives or the backend's
  comm::NodeMap nodes;  // which node each world rank is on (placement.h)

  /// True when the sharding engine holds the model states: ZeRO-2/3, FSDP,
  /// HSDP (DDP and ZeRO-1 run through the gradient buckets).
  bool sharded_engine() const;
  bool hsdp() const { return dp.mode->shard_groups; }
  /// TP fastest, then CP, then DP, then PP (Megatron's tp-cp-dp-pp; a
  /// parameter server's world is not a grid: rank 0 serves, ranks 1.. are DP
  /// ranks 0..). The grid's "dp" dimension is DP x CP: the ranks that hold the
  /// same parameters and reduce their gradients together (Megatron's dp-cp group).
  RankGrid grid() const;
  /// Ranks of a gradient-reduction group (DP x CP) and this rank's place in it.
  int grad_ranks() const { return dp.degree * cp.degree; }
  int grad_rank(int rank) const;
  /// This rank's DP coordinate (-1 for a parameter server: which sequences it
  /// reads), CP, TP and PP coordinates.
  int dp_rank(int rank) const;
  int cp_rank(int rank) const;
  int tp_rank(int rank) const;
  int pp_rank(int rank) const;
  /// Ranks that compute a forward (all but a parameter server).
  int compute_ranks() const { return dp.degree * cp.degree * tp.degree * pp.stages; }
  /// "dp=2 x tp=2+sp x pp=2 (1f1b), zero=1, bf16" for start-up lines.
  std::string describe() const;
};

/// The model config of `opt`: the preset with the size overrides applied.
/// Throws ConfigError for an unknown preset or invalid sizes.
model::GPTConfig model_config(const LayoutOptions& opt);

/// Validates the layout options against the world size and model, strand by
/// strand; throws ConfigError with the values and the fix. resolve_plan calls it.
void validate_layout(const LayoutOptions& opt, int world_size, const model::GPTConfig& cfg);

/// Resolves `opt` for a job of world_size ranks training `cfg`: fills the
/// model-dependent defaults into `opt` (seq_len 0 -> min(128, block_size);
/// --micro-batches m -> micro_batch = batch / (dp x m)), validates every strand
/// and returns the plan. Throws ConfigError naming the values and the fix.
ParallelPlan resolve_plan(LayoutOptions& opt, int world_size, const model::GPTConfig& cfg);

/// Bytes of one activation (or its gradient) crossing a pipeline stage
/// boundary: (rows, n_embd) f32, rows = micro_batch x seq_len / CP (/ TP under
/// sequence parallelism).
size_t boundary_bytes(const ParallelPlan& plan, const model::GPTConfig& cfg);

/// The gradient buckets' settings (DDP, ZeRO-1) for this plan on a rank holding `stage`.
BucketedConfig bucketed_config(const ParallelPlan& plan, const model::GPTConfig& cfg,
                               const model::PipelineStage& stage);
/// The sharding engine's settings for this plan on a rank holding `stage`
/// (with dp.zero_copy: gather and reduce through memory the shard group shares).
ShardedConfig sharded_config(const ParallelPlan& plan, const model::PipelineStage& stage);

class ParallelContext;

/// The gradient sync the plan's data-parallel mode builds (DataParallelMode::make:
/// BucketedSync, ShardedSync for pipeline stage `stage`, ParameterServerSync), in
/// the plan's precision. Call before building the model over its storage().
std::unique_ptr<GradSync> make_grad_sync(const ParallelPlan& plan, ParallelContext& ctx,
                                         const model::GPTConfig& cfg, const model::PipelineStage& stage,
                                         MemoryLedger* ledger);

/// The communicators of one rank's groups under a plan. Construction is
/// collective over the world (every rank builds its context together).
class ParallelContext {
 public:
  ParallelContext(const ParallelPlan& plan, comm::Communicator& world);
  ~ParallelContext();

  comm::Communicator& world() { return world_; }
  /// The gradient-reduction group: DP x CP ranks (the world when TP = PP = 1,
  /// and under a parameter server).
  comm::Communicator& dp() { return *dp_; }
  comm::Communicator* tp() { return tp_.get(); }    // null at TP = 1
  comm::Communicator* cp() { return cp_.get(); }    // null at CP = 1
  comm::Communicator* pp() { return pp_.get(); }    // null at PP = 1
  /// The ranks of the first and the last virtual stage (the tied embedding's
  /// copies); null at PP = 1, on the other ranks, and when one rank holds both.
  comm::Communicator* emb() { return emb_.get(); }
  /// The ranks the sharded states span: the DP group, or an HSDP shard group.
  comm::Communicator& shard() { return shard_ ? *shard_ : *dp_; }
  comm::Communicator* replicate() { return replicate_.get(); }  // HSDP: across shard groups
  int dp_rank() const { return dp_rank_; }  // which sequences this rank reads; -1 on a parameter server
  int cp_rank() const { return cp_rank_; }
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
  std::unique_ptr<comm::Communicator> tp_, cp_, dp_own_, pp_, emb_, shard_, replicate_;
  int dp_rank_ = 0, cp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
};

}  // namespace braid::parallel
