// The options of a training job, as the CLI fills them: the model and its
// parallel layout (parallel::LayoutOptions, resolved into the plan once), the
// optimizer, the schedule of validation and checkpoints, sampling and the test
// hooks.
#pragma once
#include <cstdint>
#include <string>

#include "braid/formats/checkpoint.h"
#include "braid/model/config.h"
#include "braid/parallel/layout_options.h"
#include "braid/train/loss_scaler.h"

namespace braid::train {

struct TrainOptions : parallel::LayoutOptions {
  int64_t steps = 800;
  float lr = 2e-3f;
  float min_lr = 2e-4f;
  int64_t warmup_steps = 40;
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;  // 0 disables
  uint64_t seed = 1337;
  std::string trace_out;           // Chrome trace (Perfetto) of every rank's pipeline spans
  LossScaleOptions loss_scale;     // fp16 dynamic loss scaling
  int inject_inf_rank = -1;        // test hook: this rank's gradient gets an inf ...
  int64_t inject_inf_step = -1;    // ... at this step (0-based)
  int64_t val_every = 50;    // 0 disables
  int64_t val_batches = 4;   // global batches per validation
  std::string save_dir;     // checkpoints go to save_dir/step_<N> (or step_<N>.ckpt)
  int64_t save_every = 0;   // also save after every K steps (0: at the end only)
  int64_t keep_last = 0;    // keep the newest K checkpoints of save_dir (0: all)
  std::string checkpoint_format = "sharded";  // sharded: a directory of per-rank pieces | file: rank 0's single file
  std::string resume;       // a checkpoint file, a directory (its newest that verifies), or "auto"
  int64_t save_fault_step = -1;  // test hook: the save after this step ...
  formats::SaveFault save_fault; // ... kills its writer here
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

/// Validates the training part of `o` (optimizer, validation schedule,
/// sampling, fp16 loss scaling, test hooks) for a job of world_size ranks;
/// throws ConfigError naming the values and the fix.
void validate_training(const TrainOptions& o, int world_size);

/// Validates every option: the layout (parallel::validate_layout) and the
/// training part. Throws ConfigError naming the values and the fix.
void validate_options(const TrainOptions& o, int world_size, const model::GPTConfig& cfg);

}  // namespace braid::train
