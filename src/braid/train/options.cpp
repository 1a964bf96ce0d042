#include "braid/train/options.h"

#include <cmath>

#include "braid/core/error.h"
#include "braid/parallel/plan.h"

namespace braid::train {

// The optimizer, the schedule of validation, fp16 loss scaling and the flags of
// the run itself.
void validate_training(const TrainOptions& o, int world_size) {
  BRAID_CONFIG_CHECK(o.steps > 0, "--steps ", o.steps, " must be positive");
  if (o.precision == "fp16") o.loss_scale.validate();
  BRAID_CONFIG_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr, "--lr ", o.lr, " and --min-lr ",
                     o.min_lr, " must satisfy 0 <= min-lr <= lr, lr > 0");
  BRAID_CONFIG_CHECK(std::isfinite(o.lr) && std::isfinite(o.min_lr), "--lr ", o.lr, " and --min-lr ",
                     o.min_lr, " must be finite");
  BRAID_CONFIG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "--beta1 ", o.beta1,
                     " and --beta2 ", o.beta2, " must be in [0, 1) (typical: 0.9 and 0.95)");
  BRAID_CONFIG_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "--weight-decay ",
                     o.weight_decay, " must be finite and >= 0");
  BRAID_CONFIG_CHECK(o.warmup_steps >= 0, "--warmup ", o.warmup_steps, " must be >= 0");
  BRAID_CONFIG_CHECK(o.grad_clip >= 0, "--grad-clip ", o.grad_clip, " must be >= 0 (0 disables)");
  BRAID_CONFIG_CHECK(o.sample_tokens >= 0, "--sample-tokens ", o.sample_tokens, " must be >= 0");
  BRAID_CONFIG_CHECK(o.sample_tokens == 0 || o.cp <= 1, "--sample-tokens ", o.sample_tokens, " with --cp ", o.cp,
                     ": sampling runs on whole sequences; drop --sample-tokens and sample the saved checkpoint "
                     "with braid sample");
  BRAID_CONFIG_CHECK(o.sample_top_k >= 1, "--top-k ", o.sample_top_k,
                     " must be >= 1 (the k most likely tokens are sampled from; the vocabulary size samples from all)");
  BRAID_CONFIG_CHECK(std::isfinite(o.sample_temperature) && o.sample_temperature > 0, "--temperature ",
                     o.sample_temperature, " must be > 0 (1 samples the model's distribution, lower is greedier)");
  BRAID_CONFIG_CHECK(o.val_every >= 0 && o.val_batches > 0, "--val-every ", o.val_every,
                     " must be >= 0 and --val-batches ", o.val_batches, " > 0");
  BRAID_CONFIG_CHECK(o.inject_failure_rank < world_size && o.inject_failure_step < o.steps,
                     "--inject-failure ", o.inject_failure_rank, ":", o.inject_failure_step,
                     " names rank/step outside the job's ", world_size, " ranks and ", o.steps,
                     " steps (steps count from 0)");
  BRAID_CONFIG_CHECK(o.inject_failure_kind == "throw" || o.inject_failure_kind == "hang" ||
                         o.inject_failure_kind == "stop" || o.inject_failure_kind == "kill",
                     "--inject-failure kind '", o.inject_failure_kind, "' is not known; use throw, hang, stop or kill");
}

void validate_options(const TrainOptions& o, int world_size, const model::GPTConfig& cfg) {
  parallel::validate_layout(o, world_size, cfg);
  validate_training(o, world_size);
}

}  // namespace braid::train
