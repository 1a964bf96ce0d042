#include "braid/train/checkpoint_saver.h"

#include <cstdio>

#include "braid/core/host_memory.h"
#include "braid/core/stopwatch.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::train {

CheckpointSaver::CheckpointSaver(const TrainOptions& opt, comm::Communicator& world, TrainingCheckpoint& ckpt,
                                 MemoryLedger* ledger)
    : opt_(opt), world_(world), ckpt_(ckpt) {
  if (!opt.async_save) return;
  async_ = std::make_unique<AsyncSaver>(ckpt, ledger);
  async_->prepare();
}

std::string CheckpointSaver::save(int64_t next_step, bool final) {
  const bool sharded = opt_.checkpoint_format == "sharded";
  const std::string path = checkpoint_path(opt_.save_dir, next_step, sharded);
  const formats::SaveFault none;
  const formats::SaveFault& fault = opt_.save_fault_step + 1 == next_step ? opt_.save_fault : none;
  if (async_) {
    committed(async_->commit());  // the save before, if still in flight
    async_->start(path, next_step, fault);
    if (final) committed(async_->commit());
    return path;
  }
  const auto t0 = SteadyClock::now();
  const RssRise rise;
  if (sharded)
    ckpt_.save_sharded(path, next_step, fault);
  else
    ckpt_.save(path, next_step, fault);
  if (opt_.verbose && world_.rank() == 0)
    std::printf("checkpoint %s saved in %.1f ms (rank 0's resident memory rose %.1f MiB)\n", path.c_str(),
                seconds_since(t0) * 1e3, static_cast<double>(rise.peak_rise()) / (1 << 20));
  committed(next_step);
  return path;
}

void CheckpointSaver::boundary(bool any_rank_writing) {
  if (async_ && async_->in_flight() && !any_rank_writing) committed(async_->commit());
}

void CheckpointSaver::committed(int64_t step) {
  if (step < 0 || world_.rank() != 0) return;
  // Older checkpoints go only once the new one is durable (committed).
  prune_checkpoints(opt_.save_dir, opt_.keep_last, step);
  if (async_ && opt_.verbose)
    std::printf("checkpoint %s committed (async: training blocked %.1f ms, written in %.1f ms, %.1f ms of CPU)\n",
                async_->last_dir().c_str(), async_->last_blocked_s() * 1e3, async_->last_write_s() * 1e3,
                async_->last_write_cpu_s() * 1e3);
}

}  // namespace braid::train
