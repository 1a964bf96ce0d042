// Where and how `--save` checkpoints go: DIR/step_<N> (sharded, optionally
// asynchronous) or DIR/step_<N>.ckpt, with the test fault of that step, and
// --keep-last pruning once a save is committed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/train/async_save.h"
#include "braid/train/options.h"
#include "braid/train/training_checkpoint.h"

namespace braid::train {

class CheckpointSaver {
 public:
  /// Everything must outlive this object. Collective (--async-save prepares its staging buffer).
  CheckpointSaver(const TrainOptions& opt, comm::Communicator& world, TrainingCheckpoint& ckpt, MemoryLedger* ledger);
  /// Saves step next_step; returns its path. Collective. With --async-save the
  /// save is left in flight unless `final` (the run's last).
  std::string save(int64_t next_step, bool final);
  /// Whether an asynchronous save's write is still running on this rank.
  bool writing() const { return async_ && async_->in_flight() && !async_->written(); }
  /// At a step boundary, once the ranks agreed that none is still writing:
  /// commits a save in flight. Collective.
  void boundary(bool any_rank_writing);

 private:
  /// After checkpoint `step` committed (-1: none): prunes to --keep-last and,
  /// for an asynchronous save, says what it cost.
  void committed(int64_t step);
  const TrainOptions& opt_;
  comm::Communicator& world_;
  TrainingCheckpoint& ckpt_;
  std::unique_ptr<AsyncSaver> async_;  // --async-save
};

}  // namespace braid::train
