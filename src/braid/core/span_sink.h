// SpanSink: where the parts of a run that know what they are doing (the model's
// units, the gradient engines, the collectives) report spans of time for a trace
// (--trace-out; train/trace.h records them). Null sinks cost nothing: callers
// build a span's name only when a sink is set.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace braid {

class SpanSink {
 public:
  virtual ~SpanSink() = default;
  /// Microseconds on the steady clock: the time base of every span.
  static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  /// Records span `name` of category `cat` from t0_us to t1_us (now_us() values) on
  /// `lane`, a timeline of this rank: "main" for the thread driving the step,
  /// "comm dp" (and so on) for a communicator's progress thread. Spans of one lane
  /// nest. `detail` (may be empty) is shown with the span. Thread-safe.
  virtual void span(std::string name, const char* cat, const std::string& lane, double t0_us, double t1_us,
                    std::string detail = {}) = 0;
};

/// Records the scope's lifetime as span `what` + index (index < 0: `what` alone) on
/// lane "main", when `sink` is not null.
class ScopedSpan {
 public:
  ScopedSpan(SpanSink* sink, const char* what, int64_t index, const char* cat)
      : sink_(sink), what_(what), index_(index), cat_(cat), t0_(sink ? SpanSink::now_us() : 0) {}
  ~ScopedSpan() {
    if (!sink_) return;
    std::string name(what_);
    if (index_ >= 0) name += std::to_string(index_);
    sink_->span(std::move(name), cat_, "main", t0_, SpanSink::now_us());
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  SpanSink* sink_;
  const char* what_;
  int64_t index_;
  const char* cat_;
  double t0_;
};

}  // namespace braid
