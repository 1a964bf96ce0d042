// --trace-out: a Chrome trace (open in Perfetto) of every rank's spans. Each
// rank records spans on its own steady clock; at the end rank 0 gathers them,
// puts every rank's on its own clock by the offset measured at start-up
// (clock_sync.h: ranks may run on different hosts) and writes one file.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/span_sink.h"
#include "braid/train/clock_sync.h"

namespace braid::train {

/// Lanes: "main" (the thread driving the step: steps, micro-batches, each unit's
/// forward and backward, blocking collectives, waits) and one per communicator's
/// progress thread ("comm dp", "comm shard", ...: DDP buckets, reduce-scatters,
/// all-gathers and prefetches as they run). Each lane is a thread row of the rank.
class TraceRecorder final : public SpanSink {
 public:
  /// Records nothing (and costs nothing) when path is empty.
  explicit TraceRecorder(std::string path) : path_(std::move(path)) {}

  bool enabled() const { return !path_.empty(); }
  /// Collective over `world` when enabled: measures this rank's clock offset
  /// to rank 0 (prints the largest error bound when `log`) and starts the clock.
  void start(comm::Communicator& world, bool log);
  /// Records span `name` of category `cat` from t0 to t1 (now_us() values) on lane "main".
  void span(std::string name, const char* cat, double t0, double t1) { span(std::move(name), cat, "main", t0, t1); }
  void span(std::string name, const char* cat, const std::string& lane, double t0_us, double t1_us,
            std::string detail = {}) override;
  /// Gathers every rank's spans on rank 0 and writes the trace there
  /// (atomically, with the clock offsets in its metadata). Collective.
  /// Throws ConfigError when the file cannot be written.
  void write(comm::Communicator& world) const;

 private:
  struct Event {
    std::string name, cat, detail;
    double ts, dur;
    int lane;
  };
  std::string path_;
  mutable std::mutex mu_;  // spans come from the progress threads too
  std::vector<Event> events_;
  std::vector<std::string> lanes_{"main"};  // lane index = thread id in the trace
  double origin_ = 0;
  ClockOffset clock_;
};

}  // namespace braid::train
