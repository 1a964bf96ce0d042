// What a run reports as it goes: one line per step and per validation on
// stdout (rank 0 with --verbose) and one JSON line each in --metrics-out.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <string>

#include "braid/train/options.h"
#include "braid/parallel/plan.h"

namespace braid::train {

struct StepRecord {
  int64_t step = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double ms = 0, tokens_per_sec = 0, mfu = 0;
  double fwd_bwd_ms = 0;             // forward and backward of every micro-batch (wall, this rank)
  size_t peak_mem_bytes = 0;
  uint64_t comm_bytes_sent = 0;      // payload this rank sent during the step (all collectives)
  uint64_t comm_bytes_received = 0;  // payload this rank received during the step
  int64_t staleness_max = 0;         // ps async: most updates a gradient missed
  float loss_scale = 1;              // fp16: the scale this step's backward used
  bool skipped = false;              // fp16: gradients overflowed, no update
  double bubble = 0;                 // pipeline: idle fraction of the step, mean over stages
  uint64_t param_hash = 0;
};

/// Elapsed time and the time left, from the wall time between the last steps
/// (validation and checkpoints included, as the run will see them again).
class Eta {
 public:
  /// A step has finished at `now_s` (seconds on any monotonic clock).
  void tick(double now_s);
  /// Seconds left for `remaining` more steps: the mean interval of the last
  /// kWindow steps times `remaining`; negative until two steps have ticked.
  double seconds_left(int64_t remaining) const;
  static constexpr size_t kWindow = 20;

 private:
  std::deque<double> ticks_;
};

/// 42 -> "42s", 192 -> "3m12s", 3725 -> "1h02m", 93784 -> "1d02h".
std::string format_duration(double seconds);

class RunLog {
 public:
  /// print: write the lines to stdout; metrics: this rank writes --metrics-out.
  RunLog(const TrainOptions& opt, const parallel::ParallelPlan& plan, bool print, bool metrics);
  /// Opens --metrics-out: truncated for a new run; for a run resumed at
  /// start_step > 0, the rows the interrupted run wrote after its last
  /// checkpoint are dropped (the file reads as one run) and it is appended to.
  /// Writes the options' run_record (with "start_step") first when they carry one.
  /// Throws ConfigError when the file cannot be opened.
  void open(int64_t start_step);
  void step(const StepRecord& r);
  void validation(int64_t step, float loss);
  /// The schedule's simulated bubble (F = 1, B = 2 per stage) next to theory.
  void pipeline_summary(double simulated_bubble);

 private:
  const TrainOptions& opt_;
  const parallel::ParallelPlan& plan_;
  bool print_, write_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point t_open_ = std::chrono::steady_clock::now();
  Eta eta_;
};

}  // namespace braid::train
