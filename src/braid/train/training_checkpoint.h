// The training state a checkpoint holds — parameters, AdamW moments, the fp16
// loss scale, the step — in the whole model's layout (TP = PP = 1, nothing
// sharded), whatever the layout of the run that saves or loads it, so any
// layout resumes any other. Saving gathers the DP shards (GradSync), the TP
// slices and the pipeline stages; loading takes this rank's part.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/formats/checkpoint.h"
#include "braid/train/loss_scaler.h"
#include "braid/train/optimizer.h"
#include "braid/train/options.h"
#include "braid/parallel/plan.h"

namespace braid::train {

/// Whether a run with `opt` and `cfg` can start from a checkpoint with header `hdr`
/// (read from `path`): the same model sizes; unless the checkpoint was imported or
/// only its weights are taken, the same seed, global batch and sequence length (they
/// fix the data order) and a step below --steps. Throws ConfigError naming the flag,
/// both values and the fix.
void check_resume_header(const nlohmann::json& hdr, const std::string& path, const TrainOptions& opt,
                         const model::GPTConfig& cfg, bool weights_only);

class TrainingCheckpoint {
 public:
  /// Everything must outlive this object.
  TrainingCheckpoint(const TrainOptions& opt, parallel::ParallelContext& ctx, model::GPT& model, parallel::GradSync& sync,
                     AdamW& optimizer, DynamicLossScaler& scaler);

  /// Writes `path` atomically on rank 0 with next_step as the step to resume
  /// at. Collective over the world (every rank calls it).
  /// `fault` is the test hook of formats::save_checkpoint (checkpoint.h).
  void save(const std::string& path, int64_t next_step, const formats::SaveFault& fault = {});
  /// Loads this rank's part of `path`; returns the step to resume at. Throws
  /// DataError when the file is damaged (checksum, size, header field) and
  /// ConfigError when it was saved with another seed, model size, batch or
  /// sequence length, or leaves no step to train.
  int64_t load(const std::string& path);
  /// Loads only the parameters of `path` (sizes must match; the AdamW state,
  /// seed, batch and step are not used) for evaluation or sampling; returns
  /// the checkpoint's step. Collective as load().
  int64_t load_weights(const std::string& path);
  /// After load(): the --steps of the run that saved the file (-1 when its
  /// header predates the field) and where its weights came from ("" for a
  /// braid run, else the import's "source").
  int64_t saved_total_steps() const { return saved_total_steps_; }
  const std::string& source() const { return source_; }

  /// This rank's flat array (its TP slices of its stage's tensors) -> the
  /// whole model's (collective over TP and PP); and back.
  void to_full(const float* local, std::vector<float>& full);
  void from_full(const float* full, float* local) const;

 private:
  const TrainOptions& opt_;
  parallel::ParallelContext& ctx_;
  model::GPT& model_;
  parallel::GradSync& sync_;
  AdamW& optimizer_;
  DynamicLossScaler& scaler_;
  int tp_, pp_;
  int64_t saved_total_steps_ = -1;
  std::string source_;
  int64_t load(const std::string& path, bool weights_only);
};

}  // namespace braid::train
