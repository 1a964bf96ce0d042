// The training loop: data-parallel GPT-2 training with DDP gradient sync,
// gradient accumulation, AdamW, warm-up + cosine lr, global-norm clipping,
// validation, metrics, checkpoints and sampling.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/ddp.h"
#include "braid/parallel/zero.h"
#include "braid/parallel/sharded.h"
#include "braid/parallel/pipeline.h"
#include "braid/parallel/topology.h"
#include "braid/train/clock_sync.h"
#include "braid/train/loss_scaler.h"
#include "braid/train/options.h"
#include "braid/train/parallel_plan.h"
#include "braid/train/lr_schedule.h"
#include "braid/train/sampler.h"

namespace braid::train {

struct StepRecord {
  int64_t step = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double ms = 0, tokens_per_sec = 0, mfu = 0;
  size_t peak_mem_bytes = 0;
  uint64_t comm_bytes_sent = 0;      // payload this rank sent during the step (all collectives)
  uint64_t comm_bytes_received = 0;  // payload this rank received during the step
  int64_t staleness_max = 0;         // ps async: most updates a gradient missed
  float loss_scale = 1;              // fp16: the scale this step's backward used
  bool skipped = false;              // fp16: gradients overflowed, no update
  double bubble = 0;                 // pipeline: idle fraction of the step, mean over stages
  uint64_t param_hash = 0;
};

/// One rank's trainer. `world` is the communicator of all ranks; the DP group
/// is derived from it. Token streams must outlive the trainer.
class Trainer {
 public:
  Trainer(const TrainOptions& opt, comm::Communicator& world, const std::vector<uint16_t>& train,
          const std::vector<uint16_t>* val);
  ~Trainer();

  /// Runs steps [start, opt.steps): resumes from opt.resume_path if set, logs,
  /// validates, saves, samples. Returns the per-step records.
  std::vector<StepRecord> run();
  /// One optimizer step; returns its record.
  StepRecord train_step(int64_t step);
  /// Mean validation loss over opt.val_batches global batches (same on all ranks).
  float evaluate();
  /// Samples `n` tokens after `prompt` (rank-local; deterministic from the seed).
  std::vector<int32_t> sample(const std::vector<int32_t>& prompt, int64_t n, uint64_t seed);

  model::GPT& model() { return *model_; }
  /// True when forward is collective (parameters sharded, ZeRO-3/FSDP): every
  /// rank must then call sample() and evaluate() together.
  bool forward_is_collective() const {
    return tp_size_ > 1 || pp_size_ > 1 || (engine_ && engine_->config().stage == 3);
  }
  /// The options in force (model-dependent defaults resolved).
  const TrainOptions& options() const { return opt_; }
  const MemoryLedger& ledger() const { return ledger_; }
  /// The resolved parallel layout.
  const ParallelPlan& plan() const { return plan_; }
  int64_t start_step() const { return start_step_; }
  /// After run(): the step a stop signal ended the run at (the same on every
  /// rank; see preemption.h), or -1 when it ran to the end.
  int64_t stopped_at() const { return stopped_at_; }
  /// FNV-1a hash of the parameter bytes.
  /// Under ZeRO-3/FSDP the hash covers each unit as gathered (collective).
  uint64_t param_hash();
  /// Writes a checkpoint (collective under ZeRO: every rank must call it).
  void save(const std::string& path, int64_t next_step);
  /// Loads parameters and this rank's AdamW state; returns the step to resume at.
  int64_t load(const std::string& path);

 private:
  /// Global-norm clipping factor: grad_clip / (norm + 1e-6) when the norm
  /// exceeds --grad-clip, else 1.
  float clip_coef(float norm) const;
  float clip_and_norm();
  /// Global sum of squared gradients (times mult^2), identical on all ranks.
  double grad_sumsq(float mult);
  void adamw(float lr, int64_t t);
  /// Forward and backward over this rank's micro-batches of `step`; returns the
  /// mean loss. release_buckets: report finished gradient ranges to DDP/ZeRO.
  double forward_backward(int64_t step, bool release_buckets);
  void maybe_inject_failure(int64_t step) const;
  /// Payload bytes over the world and every sub-communicator of this rank.
  uint64_t bytes_sent() const;
  uint64_t bytes_received() const;
  /// Fills timing, throughput, MFU, memory and traffic; checks replicas if asked.
  void finish_record(StepRecord& r, double seconds, uint64_t sent0, uint64_t recv0);
  // Parameter server (trainer_ps.cpp): rank 0 serves, ranks 1..N-1 work.
  StepRecord ps_sync_step(int64_t step);
  std::vector<StepRecord> run_ps_async();
  void ps_apply(float lr, int64_t t, StepRecord& r);

  TrainOptions opt_;
  comm::Communicator& world_;
  const std::vector<uint16_t>& train_;
  const std::vector<uint16_t>* val_;
  MemoryLedger ledger_;
  std::unique_ptr<model::GPT> model_;
  Buffer m_, v_;                 // AdamW moments: (n_params), or (shard) under ZeRO-1
  Buffer tokens_, targets_;      // (micro_batch, T) int32
  std::unique_ptr<parallel::DDPGradSync> ddp_;   // zero == 0
  std::unique_ptr<parallel::ZeroStage1> zero_;   // zero == 1 in fp32
  ParallelPlan plan_;                     // the resolved layout
  std::unique_ptr<ParallelContext> ctx_;  // this rank's groups
  // Degrees and coordinates of this rank (from plan_ and ctx_).
  int tp_size_ = 1, tp_rank_ = 0;
  bool norm_counts_ = true;  // this rank's owned gradients are counted in the global norm
  /// Local (TP-sharded, one pipeline stage's) flat arrays <-> the whole model's
  /// TP = PP = 1 layout (checkpoints). tp_to_full is collective over TP and PP.
  void tp_to_full(const float* local, std::vector<float>& full);
  void full_to_tp(const float* full, float* local) const;
  std::unique_ptr<parallel::ShardedEngine> engine_;
  std::unique_ptr<DynamicLossScaler> scaler_;
  DType compute_ = DType::f32;
  StepRecord engine_step(int64_t step);
  /// After the engine's gradients are final: loss-scale update (found-inf over
  /// the world), global norm, clipping and the mixed-precision AdamW; sets
  /// r.lr, r.grad_norm, r.skipped.
  void engine_update(StepRecord& r);
  // Pipeline parallelism (trainer_pp.cpp).
  int pp_size_ = 1, pp_rank_ = 0;
  std::vector<parallel::StageProgram> programs_;
  Buffer grad_send_buf_;  // parallel::kGradSendBuffers x (boundary rows, C) f32
  double simulated_bubble_ = 0;  // the schedule's bubble with unit costs (printed at start)
  StepRecord pipeline_step(int64_t step);
  float pipeline_evaluate_batch(const size_t* offsets, int64_t micro_count, const uint16_t* stream);
  /// Forward of one (B, T) micro-batch (number `micro` of `micros`, for the
  /// tags) through every virtual stage; every pipeline rank calls it. Returns
  /// the mean loss on the last stage when targets are given, else 0.
  float pipeline_forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, int micro,
                         int64_t micros);
  /// Sums the tied embedding's gradient over the first and last stage (the
  /// owned gradients, or the engine's after its DP reduction).
  void sync_tied_embedding();
  // --trace-out: spans of this rank (microseconds since this rank's run()
  // started, on its own steady clock).
  struct TraceEvent {
    std::string name, cat;
    double ts, dur;
  };
  std::vector<TraceEvent> trace_;
  double trace_origin_ = 0;
  ClockOffset trace_clock_;  // this rank's clock to rank 0's (measured when tracing)
  /// Records span `what` (+ index when >= 0) if --trace-out is set.
  /// chunk >= 0: the span belongs to that model chunk (named ".c<chunk>" when a rank holds several).
  void trace(const char* what, int64_t index, const char* cat, double t0, double t1, int chunk = -1);
  /// Gathers every rank's spans on rank 0, puts them on rank 0's clock and
  /// writes the Chrome trace (atomic) with the clock offsets in its metadata.
  void write_trace();
  /// The pieces of the flat buffer this rank updates (everything without ZeRO),
  /// split at parameter boundaries so each piece has one weight-decay setting.
  struct UpdateSegment {
    size_t offset, len, state;  // flat offset, elements, offset in m_/v_
    bool decay;
    bool tp_replicated;  // the same tensor on every TP rank (count it once in the norm)
    bool pp_copy = false;  // the last stage's copy of the tied embedding (counted on the first)
  };
  std::vector<UpdateSegment> update_segments_;
  std::unique_ptr<DistributedSampler> sampler_;
  LrSchedule sched_;
  bool ps_ = false;              // --dp-mode ps
  Buffer ps_recv_;               // server: (n_params) receive buffer for pushed gradients
  int dp_size_, dp_rank_;        // under ps: the workers (rank - 1); the server has -1
  int64_t accum_steps_;
  int64_t start_step_ = 0;
  /// Graceful stop (preemption.h): whether any rank received a stop signal, as
  /// a max over the world at a step boundary (collective); sets stop_signal_.
  bool stop_agreed();
  /// Saves (with --save) and prints where the run stopped; every rank calls it.
  void finish_stopped_run();
  int stop_signal_ = 0;
  int64_t stopped_at_ = -1;
};

}  // namespace braid::train
