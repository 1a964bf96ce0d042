// The training loop, one step path for every layout: the plan's gradient sync
// (grad_sync.h), the pipeline executor (a single stage without a pipeline),
// AdamW over the owned pieces, loss scaling, warm-up + cosine lr, global-norm
// clipping; then validation, metrics, checkpoints, sampling and the stop at a
// step boundary.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "braid/data/token_view.h"
#include "braid/comm/communicator.h"
#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/pipeline/executor.h"
#include "braid/parallel/topology.h"
#include "braid/train/evaluation.h"
#include "braid/train/fault_injection.h"
#include "braid/train/trace.h"
#include "braid/train/checkpoint_saver.h"
#include "braid/train/training_checkpoint.h"
#include "braid/train/loss_scaler.h"
#include "braid/train/options.h"
#include "braid/parallel/plan.h"
#include "braid/train/run_log.h"
#include "braid/train/lr_schedule.h"
#include "braid/train/optimizer.h"
#include "braid/data/sampler.h"

namespace braid::train {

/// One rank's trainer. `world` is the communicator of all ranks; the DP group
/// is derived from it. Token streams (views: a vector, a mapped token file)
/// must outlive the trainer; they are read, never copied.
class Trainer {
 public:
  /// An empty `val` means no validation stream.
  Trainer(const TrainOptions& opt, comm::Communicator& world, data::TokenView train,
          data::TokenView val);
  /// The same with the validation stream by pointer (nullptr: none).
  Trainer(const TrainOptions& opt, comm::Communicator& world, data::TokenView train,
          const std::vector<uint16_t>* val)
      : Trainer(opt, world, train, val ? data::TokenView(*val) : data::TokenView()) {}
  ~Trainer();

  /// Runs steps [start, opt.steps): resumes from opt.resume if set, logs,
  /// validates, saves, samples. Returns the per-step records.
  std::vector<StepRecord> run();
  /// One optimizer step; returns its record.
  StepRecord train_step(int64_t step);
  /// Mean validation loss over opt.val_batches global batches (same on all ranks).
  float evaluate();
  using WindowLoss = train::WindowLoss;
  /// Scores `tokens` as llm.c and nanoGPT evaluate (window_loss, T = seq_len,
  /// micro-batches of micro_batch over the DP ranks). Collective over the
  /// world (every rank calls it; the result is the same on all). Throws
  /// ConfigError when the stream holds no whole window or, under sequence
  /// parallelism, when T does not divide by --tp.
  WindowLoss evaluate_windows(data::TokenView tokens, int64_t max_windows);
  /// Samples `n` tokens after `prompt` (rank-local; deterministic from the seed).
  std::vector<int32_t> sample(const std::vector<int32_t>& prompt, int64_t n, uint64_t seed);

  model::GPT& model() { return *model_; }
  /// True when forward is collective (parameters sharded, ZeRO-3/FSDP): every
  /// rank must then call sample() and evaluate() together.
  bool forward_is_collective() const {
    return tp_size_ > 1 || pp_size_ > 1 || sync_->params_sharded();
  }
  /// The options in force (model-dependent defaults resolved).
  const TrainOptions& options() const { return opt_; }
  /// The per-rank matmul ceiling MFU is reported against (FLOP/s; 0: no MFU).
  void set_peak_flops_per_rank(double flops) { opt_.peak_flops_per_rank = flops; }
  const MemoryLedger& ledger() const { return ledger_; }
  /// The resolved parallel layout.
  const parallel::ParallelPlan& plan() const { return plan_; }
  /// How this rank's data-parallel collectives move bytes, for the start-up
  /// log ("zero-copy ..." or "messages (why)"); empty without data parallelism.
  std::string data_parallel_transport() const { return sync_->transport(); }
  int64_t start_step() const { return start_step_; }
  /// After run(): the step a stop signal ended the run at (the same on every
  /// rank; see preemption.h), or -1 when it ran to the end.
  int64_t stopped_at() const { return stopped_at_; }
  /// FNV-1a hash of the parameter bytes.
  /// Under ZeRO-3/FSDP the hash covers each unit as gathered (collective).
  uint64_t param_hash();
  /// Writes a checkpoint file (collective: every rank must call it).
  void save(const std::string& path, int64_t next_step);
  /// Loads parameters and this rank's AdamW state; returns the step to resume at.
  int64_t load(const std::string& path);
  /// Loads only the parameters of checkpoint `path` (eval, sample); returns its step.
  int64_t load_weights(const std::string& path);

 private:
  /// Global-norm clipping factor: grad_clip / (norm + 1e-6) when the norm
  /// exceeds --grad-clip, else 1.
  float clip_coef(float norm) const;
  /// Forward and backward over this rank's micro-batches of `step` through
  /// the executor (the gradient sync hooks into the last or every backward);
  /// returns the mean loss (the last pipeline stage's; 0 on the others) and
  /// adds the seconds spent computing to *compute_s when given.
  double forward_backward(int64_t step, double* compute_s = nullptr);
  /// After the gradients are final: loss-scale update (found-inf over the
  /// world), global norm, clipping, AdamW over the owned pieces and the
  /// parameters' refresh; sets r.lr, r.grad_norm, r.skipped (a parameter
  /// server's workers take them from the server) and checks the loss.
  void update(StepRecord& r);
  /// Payload bytes over the world and every sub-communicator of this rank.
  uint64_t bytes_sent() const;
  uint64_t bytes_received() const;
  /// Fills timing, throughput, MFU, memory and traffic; checks replicas if asked.
  void finish_record(StepRecord& r, double seconds, uint64_t sent0, uint64_t recv0);
  // Parameter server (trainer_ps.cpp): rank 0 serves, ranks 1..N-1 work.
  std::vector<StepRecord> run_ps_async();
  void ps_apply(float lr, int64_t t, StepRecord& r);

  TrainOptions opt_;
  comm::Communicator& world_;
  data::TokenView train_;  // (N,) token ids
  data::TokenView val_;    // (N_val,); empty: no validation
  MemoryLedger ledger_;
  std::unique_ptr<model::GPT> model_;
  Buffer tokens_, targets_;      // (micro_batch, T) int32
  std::unique_ptr<parallel::GradSync> sync_;  // the data-parallel strand
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<TrainingCheckpoint> checkpoint_;
  parallel::ParallelPlan plan_;                     // the resolved layout
  std::unique_ptr<parallel::ParallelContext> ctx_;  // this rank's groups
  // Degrees and coordinates of this rank (from plan_ and ctx_).
  int tp_size_ = 1, tp_rank_ = 0;
  std::unique_ptr<DynamicLossScaler> scaler_;
  DType compute_ = DType::f32;
  // The step (trainer_pp.cpp): the executor and the pipeline layout.
  int pp_size_ = 1, pp_rank_ = 0;
  std::unique_ptr<parallel::PipelineExecutor> executor_;  // runs every step's program
  class TrainStage;  // the model and this step's data, as the executor sees them
  double simulated_bubble_ = 0;  // the schedule's bubble with unit costs (printed at start)
  /// Forward of one (B, T) micro-batch through every pipeline stage (every
  /// pipeline rank calls it); the loss on the last stage when targets are
  /// given, else 0. Leaves the logits on the last stage.
  float forward_pass(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  /// Gathers the (B, T) windows at `offsets` of `tokens` and runs forward_pass;
  /// the loss on every pipeline rank (evaluation.h's BatchLoss).
  float batch_loss(data::TokenView tokens, const size_t* offsets, int64_t B, int64_t T);
  /// Forward over `context`; the full logits row of position len - 1 into
  /// `row` (padded_vocab_size floats) on every rank (sampling.h's LastLogits).
  void last_logits(const std::vector<int32_t>& context, int64_t len, float* row);
  std::string resume_from_;  // the checkpoint --resume names ("" for a fresh start)
  std::shared_ptr<TraceRecorder> tracer_;  // --trace-out (shared with the communicators while tracing)
  /// Records span `what` (+ index when >= 0) if --trace-out is set.
  /// chunk >= 0: the span belongs to that model chunk (named ".c<chunk>" when a rank holds several).
  void trace(const char* what, int64_t index, const char* cat, double t0, double t1, int chunk = -1);
  /// Points the communicators, the model's units and the gradient engine at `sink` (null: stop).
  void trace_into(const std::shared_ptr<TraceRecorder>& sink);
  std::unique_ptr<data::DistributedSampler> sampler_;
  LrSchedule sched_;
  bool ps_ = false;              // --dp-mode ps
  int dp_size_, dp_rank_;        // under ps: the workers (rank - 1); the server has -1
  int cp_size_ = 1;              // context parallel: each rank holds seq_len / CP tokens of a sequence
  model::SequenceLayout cp_layout_;  // which tokens of each sequence this rank holds
  /// Gathers micro-batch sequences (B of T + 1 tokens at `offsets`) into
  /// tokens_ and targets_, keeping this rank's chunks under context parallelism.
  void load_batch(data::TokenView data, const size_t* offsets, int64_t B, int64_t T);
  int64_t accum_steps_;
  int64_t start_step_ = 0;
  /// Graceful stop (preemption.h): whether any rank received a stop signal, as
  /// a max over the world at a step boundary (collective); sets stop_signal_.
  bool stop_agreed();
  /// The steps of a run from start_step_ (or the asynchronous server's loop),
  /// with validation and checkpoints on their schedule.
  std::vector<StepRecord> run_steps(RunLog& log, bool validate);
  void validate_now(RunLog& log, int64_t step);
  /// Saves (with --save) and prints where the run stopped; every rank calls it.
  void finish_stopped_run();
  /// saver_->save (checkpoint_saver.h): a --save checkpoint of next_step.
  std::string save_to_dir(int64_t next_step, bool final);
  std::unique_ptr<CheckpointSaver> saver_;
  int stop_signal_ = 0;
  int64_t stopped_at_ = -1;
};

}  // namespace braid::train
