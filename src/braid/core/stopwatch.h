// Wall time on the steady clock, for the measurements braid makes of itself.
#pragma once
#include <chrono>

namespace braid {

using SteadyClock = std::chrono::steady_clock;

/// Seconds from t0 to now.
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace braid
