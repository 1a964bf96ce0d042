// --trace-out: a Chrome trace (open in Perfetto) of every rank's spans. Each
// rank records spans on its own steady clock; at the end rank 0 gathers them,
// puts every rank's on its own clock by the offset measured at start-up
// (clock_sync.h: ranks may run on different hosts) and writes one file.
#pragma once
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/train/clock_sync.h"

namespace braid::train {

class TraceRecorder {
 public:
  /// Records nothing (and costs nothing) when path is empty.
  explicit TraceRecorder(std::string path) : path_(std::move(path)) {}

  bool enabled() const { return !path_.empty(); }
  /// Collective over `world` when enabled: measures this rank's clock offset
  /// to rank 0 (prints the largest error bound when `log`) and starts the clock.
  void start(comm::Communicator& world, bool log);
  /// Microseconds on this rank's steady clock (the spans' time base).
  static double now_us();
  /// Records span `name` of category `cat` from t0 to t1 (now_us() values).
  void span(std::string name, const char* cat, double t0, double t1);
  /// Gathers every rank's spans on rank 0 and writes the trace there
  /// (atomically, with the clock offsets in its metadata). Collective.
  /// Throws ConfigError when the file cannot be written.
  void write(comm::Communicator& world) const;

 private:
  struct Event {
    std::string name, cat;
    double ts, dur;
  };
  std::string path_;
  std::vector<Event> events_;
  double origin_ = 0;
  ClockOffset clock_;
};

}  // namespace braid::train
