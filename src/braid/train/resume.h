// Where a run starts: the checkpoint `--resume DIR|auto|FILE` names, agreed by
// every rank, and the line that tells the user what was resumed.
#pragma once
#include <cstdint>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/train/options.h"
#include "braid/train/training_checkpoint.h"

namespace braid::train {

/// The checkpoint opt.resume names: itself, or the newest that verifies in its
/// directory (opt.save_dir's for "auto"; "" when that holds none yet: a fresh
/// start). Rank 0 lists the directory and broadcasts the list; every rank then
/// checks its share of each candidate, newest first (a sharded checkpoint's
/// pieces split between the ranks; a file by rank 0), and they agree on the
/// first that passes. Collective over `world`. Throws DataError
/// when no checkpoint of the directory verifies, ConfigError when a named
/// directory holds none, Error when rank 0 cannot read it.
std::string find_resume_file(const TrainOptions& opt, comm::Communicator& world);

/// --resume auto whose newest checkpoint (`from`, find_resume_file's answer)
/// already holds --steps: the run is finished. Returns that step, or -1 when
/// there is something to train (or the option is not auto).
int64_t finished_step(const TrainOptions& opt, const std::string& from);

/// Prints (the caller: rank 0 with --verbose) where the run starts: the file
/// `from` resumed at `step`, an imported model's fresh fine-tuning, a changed
/// --steps total, or --resume auto's fresh start.
void print_start_point(const std::string& from, int64_t step, const TrainingCheckpoint& ckpt,
                       const TrainOptions& opt);

}  // namespace braid::train
