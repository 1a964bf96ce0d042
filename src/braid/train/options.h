// The options of a training job, as the CLI fills them: the model, the
// parallel layout, the optimizer, the schedule of validation and checkpoints.
// ParallelPlan (parallel_plan.h) resolves and validates the layout part once.
#pragma once
#include <cstdint>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/train/checkpoint.h"
#include "braid/train/loss_scaler.h"

namespace braid::train {

/// --micro-batch auto: batch / dp, or with a pipeline of P stages the largest
/// micro-batch that leaves at least P micro-batches per step (resolve_plan).
inline constexpr int64_t kMicroBatchAuto = -1;

struct TrainOptions {
  std::string model = "small";
  // Overrides of the preset's sizes (0: keep the preset's); the vocabulary is
  // padded to a multiple of 64 again.
  int64_t vocab_size = 0, n_layer = 0, n_head = 0, n_embd = 0;
  int64_t block_size = 0;  // context length: positions in wpe (0: the preset's)
  int64_t steps = 800;
  int64_t global_batch = 16;  // sequences per optimizer step, over all DP ranks
  int64_t micro_batch = 8;    // sequences per forward/backward on one rank (kMicroBatchAuto: resolved by the plan)
  int64_t seq_len = 0;        // 0: min(128, block_size)
  float lr = 2e-3f;
  float min_lr = 2e-4f;
  int64_t warmup_steps = 40;
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;  // 0 disables
  uint64_t seed = 1337;
  int dp = 0;  // 0: all ranks / tp
  int tp = 1;  // tensor-parallel degree (TP groups are consecutive ranks)
  bool sequence_parallel = false;  // shard LayerNorm/dropout/residual rows over TP
  float dropout = 0.0f;            // embedding and residual dropout probability
  int pp = 1;                      // pipeline stages (consecutive layer ranges)
  std::string pp_layers;           // explicit layers per stage, e.g. "3,5" (empty: even split)
  std::string schedule = "1f1b";   // naive | gpipe | 1f1b | interleaved | zb-h1
  int virtual_stages = 1;          // interleaved: model chunks per pipeline rank
  int64_t micro_batches = 0;       // micro-batches per step per pipeline (0: batch / (dp x micro-batch))
  std::string trace_out;           // Chrome trace (Perfetto) of every rank's pipeline spans
  std::string recompute = "none";  // activation checkpointing: none | selective | full
  double bucket_mb = 4.0;
  bool overlap = true;
  bool zero_copy = true;  // DP reductions / gathers through memory the DP ranks of a node share
  int zero = 0;  // ZeRO stage 0 (DDP), 1 (moments sharded), 2 (+ gradients), 3 (+ parameters)
  bool fsdp = false;            // FSDP: stage 3 with one flat parameter per unit (block)
  int fsdp_shard_size = 0;      // HSDP: shard within groups of this many ranks (0: all DP ranks)
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (compute copies; master weights f32)
  std::string reduce_dtype = "fp32";  // gradient accumulation and reduction: fp32 | the precision
  bool fp32_residual = false;  // keep the residual stream in f32 under --precision bf16|fp16
  std::string matmul_precision = "half";  // half: matmuls in the precision where oneDNN can | fp32: on rounded values
  LossScaleOptions loss_scale;     // fp16 dynamic loss scaling
  int inject_inf_rank = -1;        // test hook: this rank's gradient gets an inf ...
  int64_t inject_inf_step = -1;    // ... at this step (0-based)
  std::string dp_mode = "ddp";  // "ddp" (all-reduce) or "ps" (rank 0 is a parameter server)
  bool ps_async = false;        // ps: apply each worker's gradient as it arrives
  int64_t staleness = 0;        // ps async: a worker runs at most this many iterations ahead
  comm::Algorithm algo = comm::Algorithm::ring;
  int64_t val_every = 50;    // 0 disables
  int64_t val_batches = 4;   // global batches per validation
  std::string save_dir;     // checkpoints go to save_dir/step_<N>.ckpt
  int64_t save_every = 0;   // also save after every K steps (0: at the end only)
  int64_t keep_last = 0;    // keep the newest K checkpoints of save_dir (0: all)
  std::string resume;       // a checkpoint file, a directory (its newest that verifies), or "auto"
  int64_t save_fault_step = -1;  // test hook: the save after this step ...
  SaveFault save_fault;          // ... kills its writer here
  std::string metrics_out;
  std::string run_record;       // a JSON object: the metrics file's first line (the resolved configuration, commit, hosts)
  uint64_t max_memory = 0;      // bytes one rank may use (0: its share of the host's available memory)
  bool check_replicas = false;  // hash parameters every step and compare across DP ranks
  std::string sample_prompt = "The";
  int64_t sample_tokens = 0;
  float sample_temperature = 0.8f;
  int64_t sample_top_k = 40;
  double peak_flops_per_rank = 0;  // fp32 matmul throughput per rank (FLOP/s), for MFU
  int inject_failure_rank = -1;
  int64_t inject_failure_step = -1;
  // How the injected failure shows: "throw" (an exception), "hang" (the rank sleeps
  // outside any communication call), "stop" (SIGSTOP: the process freezes, its
  // watchdog too), "kill" (SIGKILL). Only "throw" with ranks as threads.
  std::string inject_failure_kind = "throw";
  bool verbose = true;  // rank 0 prints progress
};

}  // namespace braid::train
