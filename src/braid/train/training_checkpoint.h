// The training state a checkpoint holds — parameters, AdamW moments, the fp16
// loss scale, the step — in the whole model's layout (TP = PP = 1, nothing
// sharded), whatever the layout of the run that saves or loads it, so any
// layout resumes any other. Two forms: a sharded checkpoint directory
// (formats/sharded_checkpoint.h), which every rank writes its own pieces of
// and reads only what it holds from; and the single file (checkpoint.h),
// which rank 0 writes after gathering the DP shards, TP slices and pipeline
// stages, and every rank reads whole.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/sharded_checkpoint.h"
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

/// The header of checkpoint `path`, a sharded directory's (its metadata) or a
/// file's, checked as the loaders check it. Throws ConfigError / DataError.
nlohmann::json read_any_checkpoint_header(const std::string& path);

/// One piece of a save as this rank writes it: `n` f32 values at `data`
/// (live state, or a staging copy for an asynchronous save).
struct SaveItem {
  int64_t tensor;  // global tensor index
  int state;       // formats::kPieceStates
  formats::TensorBox box;
  int64_t begin, end;
  const float* data;
};

/// Writes `items` as the pieces of piece file dir/file (through a temporary,
/// fsync'd and renamed); returns their metadata (file index 0) and sets
/// `bytes`. Throws ConfigError on an I/O failure. `armed`: fault applies.
std::vector<formats::PieceMeta> write_save_items(const std::string& dir, const std::string& file,
                                                 const std::vector<SaveItem>& items, const formats::SaveFault& fault,
                                                 bool armed, uint64_t& bytes);

class TrainingCheckpoint {
 public:
  /// Everything must outlive this object.
  TrainingCheckpoint(const TrainOptions& opt, parallel::ParallelContext& ctx, model::GPT& model, parallel::GradSync& sync,
                     AdamW& optimizer, DynamicLossScaler& scaler);
  ~TrainingCheckpoint();

  /// Writes `path` atomically on rank 0 with next_step as the step to resume
  /// at. Collective over the world (every rank calls it).
  /// `fault` is the test hook of formats::save_checkpoint (checkpoint.h).
  void save(const std::string& path, int64_t next_step, const formats::SaveFault& fault = {});
  /// Writes the sharded checkpoint directory `dir` with next_step as the step
  /// to resume at: each rank the pieces assigned to it, straight from its
  /// state; rank 0 the metadata, last. Collective over the world.
  void save_sharded(const std::string& dir, int64_t next_step, const formats::SaveFault& fault = {});

  // The phases of a sharded save, for the asynchronous saver (async_save.h).
  /// Collective: rank 0 creates `dir` and names the save; returns the name of
  /// this rank's piece file ("" when it writes nothing).
  std::string begin_sharded_save(const std::string& dir);
  /// The pieces this rank writes, pointing into its live state.
  std::vector<SaveItem> save_items();
  /// The metadata of a save at next_step, before its pieces and files.
  formats::ShardedMetadata save_metadata(int64_t next_step) const;
  /// Collective: every rank's pieces (`mine`, written to its piece file of
  /// `bytes` bytes) or its write's error reach rank 0, which then writes
  /// `meta` with them (the commit) and removes the files of an earlier save of
  /// the same step. Throws on every rank, naming the failing rank and its
  /// reason, when any rank's write (or the commit) failed.
  void commit_sharded_save(const std::string& dir, formats::ShardedMetadata meta, uint64_t bytes,
                           const std::vector<formats::PieceMeta>& mine, const std::string& error,
                           const formats::SaveFault& fault);
  /// Whether `fault`'s piece-file phases fire on this rank.
  bool fault_armed(const formats::SaveFault& fault) const;
  /// Loads this rank's part of `path` (a sharded directory or a file); returns the step to resume at. Throws
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
  /// After load(): bytes this rank read from the checkpoint (a sharded one:
  /// the chunks that hold what it owns; a file: all of it).
  uint64_t loaded_bytes() const { return loaded_bytes_; }

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
  uint64_t loaded_bytes_ = 0;
  std::string source_;
  struct SavePlan;
  std::unique_ptr<SavePlan> save_plan_;
  std::string token_;  // names the current sharded save's piece files  // ownership never changes: computed at the first save
  int64_t load(const std::string& path, bool weights_only);
  int64_t load_file(const std::string& path, bool weights_only);
  int64_t load_sharded(const std::string& dir, bool weights_only);
  /// Takes the step, total steps, source and loss scale of a loaded header.
  int64_t apply_header(const nlohmann::json& hdr, bool weights_only);
  nlohmann::json header(int64_t next_step, size_t n_params) const;
  const SavePlan& save_plan();
};

}  // namespace braid::train
