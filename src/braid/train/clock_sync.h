// Clock offsets between ranks: processes on different hosts share no clock, so
// timestamps taken on one rank are put on rank 0's clock by an offset measured
// with a ping-pong over the communicator (Cristian's algorithm).
#pragma once
#include <functional>
#include <vector>

#include "braid/comm/communicator.h"

namespace braid::train {

/// One round trip from a rank to its reference peer, all in microseconds:
/// t_send and t_recv on the probing rank's clock (request sent, reply
/// received), t_peer on the peer's clock (read when it replied).
struct ClockProbe {
  double t_send = 0, t_peer = 0, t_recv = 0;
};

/// peer clock = own clock + offset_us, within +-error_us (microseconds).
struct ClockOffset {
  double offset_us = 0, error_us = 0;
};

/// Cristian's algorithm (F. Cristian, "Probabilistic clock synchronization",
/// Distributed Computing 3, 1989; the same estimate as NTP's offset): of the
/// probes, the one with the smallest round trip RTT = t_recv - t_send gives
/// offset = t_peer - (t_send + t_recv) / 2 and error = RTT / 2, a hard bound
/// since the peer read its clock somewhere inside [t_send, t_recv] (clock drift
/// over one round trip neglected). Throws braid::Error when `probes` is empty or
/// a probe has t_recv < t_send.
ClockOffset estimate_clock_offset(const std::vector<ClockProbe>& probes);

/// The steady clock of this process in microseconds (arbitrary epoch).
double steady_now_us();

/// Collective over `comm`: every rank other than 0 runs `round_trips` ping-pongs
/// with rank 0, one rank at a time while the others sleep, and returns its
/// offset to rank 0's clock per estimate_clock_offset; rank 0 returns {0, 0}. `now_us` reads
/// this rank's clock in microseconds. Throws braid::Error when round_trips < 1
/// or on a transport failure.
ClockOffset measure_clock_offset(comm::Communicator& comm, int round_trips = 16,
                                 const std::function<double()>& now_us = steady_now_us);

}  // namespace braid::train
