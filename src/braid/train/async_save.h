// Asynchronous sharded saves (--async-save), after PyTorch DCP's async_save:
// the step's state is copied into a host staging buffer on the training
// thread, a background thread writes this rank's piece file while training
// goes on, and the commit — a collective: every rank's pieces reach rank 0,
// which writes the metadata — runs on the training thread at the first step
// boundary where every rank's write is done (the trainer learns that from the
// stop signal's per-step all-reduce, so no extra collective). At most one
// save is in flight: the next one, or the run's end, waits for it.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/core/memory.h"
#include "braid/train/training_checkpoint.h"

namespace braid::train {

class AsyncSaver {
 public:
  /// `ckpt` must outlive this object; the staging buffer is `ledger`'s
  /// MemCategory::staging (allocated at the first save: the pieces this rank
  /// writes, params and both moments, f32).
  AsyncSaver(TrainingCheckpoint& ckpt, MemoryLedger* ledger);
  /// Waits for a write still running (its save stays uncommitted).
  ~AsyncSaver();

  /// Collective: works out which pieces this rank writes and allocates the
  /// staging buffer for them, so that saves find it ready (and the peak
  /// memory shows it from the start). start() does it when not done yet.
  void prepare();
  /// Collective: starts saving `dir` at next_step (commits the save in flight
  /// first), copies this rank's pieces into the staging buffer and returns,
  /// leaving the write to the background thread.
  void start(const std::string& dir, int64_t next_step, const formats::SaveFault& fault);
  /// Whether a save was started and not yet committed (the same on every rank).
  bool in_flight() const { return pending_ != nullptr; }
  /// Whether this rank's write of the save in flight has finished.
  bool written() const;
  /// Collective: waits for this rank's write, then commits. Returns the step
  /// committed, or -1 when none was in flight. Throws on every rank, naming
  /// the rank and its reason, when a write or the commit failed.
  int64_t commit();
  /// Seconds the training thread spent in the last start() (blocked), and
  /// that save's write on the background thread.
  double last_blocked_s() const { return blocked_s_; }
  double last_write_s() const { return write_s_; }
  /// CPU seconds the background thread spent on that write (checksums, copies into the page cache).
  double last_write_cpu_s() const { return write_cpu_s_; }
  const std::string& last_dir() const { return last_dir_; }

 private:
  struct Pending;
  TrainingCheckpoint& ckpt_;
  MemoryLedger* ledger_;
  Buffer staging_;
  std::unique_ptr<Pending> pending_;
  double blocked_s_ = 0, write_s_ = 0, write_cpu_s_ = 0;
  std::string last_dir_;
};

}  // namespace braid::train
