#include "braid/train/clock_sync.h"

#include <chrono>
#include <string>
#include <thread>

#include "braid/core/error.h"

namespace braid::train {

namespace {
constexpr int kTagClockGo = 7201, kTagClockPing = 7202, kTagClockPong = 7203, kTagClockDone = 7204;
}  // namespace

ClockOffset estimate_clock_offset(const std::vector<ClockProbe>& probes) {
  if (probes.empty()) throw Error("estimate_clock_offset: no probes");
  const ClockProbe* best = nullptr;
  for (const auto& p : probes) {
    if (p.t_recv < p.t_send)
      throw Error("estimate_clock_offset: reply received at " + std::to_string(p.t_recv) + " us before the request was sent at " +
                  std::to_string(p.t_send) + " us");
    if (!best || p.t_recv - p.t_send < best->t_recv - best->t_send) best = &p;
  }
  // The least-delayed round trip: its midpoint is the closest guess of when the peer read its clock.
  return {best->t_peer - 0.5 * (best->t_send + best->t_recv), 0.5 * (best->t_recv - best->t_send)};
}

double steady_now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ClockOffset measure_clock_offset(comm::Communicator& comm, int round_trips, const std::function<double()>& now_us) {
  if (round_trips < 1) throw Error("measure_clock_offset: round_trips must be >= 1, got " + std::to_string(round_trips));
  const char token = 0;
  if (comm.rank() == 0) {
    // Serve each rank in turn, its turn opened by a go message; the clock is
    // read as late as possible before each reply. A last message to all releases them together.
    for (int q = 1; q < comm.size(); ++q) {
      comm.send(&token, 1, q, kTagClockGo);
      for (int k = 0; k < round_trips; ++k) {
        char ping = 0;
        comm.recv(&ping, 1, q, kTagClockPing);
        const double t = now_us();
        comm.send(&t, sizeof t, q, kTagClockPong);
      }
    }
    for (int q = 1; q < comm.size(); ++q) comm.send(&token, 1, q, kTagClockDone);
    return {};
  }
  // Wait for a message without spinning: a rank polling in recv takes a core
  // from the pair measuring, which on an oversubscribed host stretches every
  // round trip by a scheduler time slice.
  auto idle_wait = [&](int tag) {
    char c = 0;
    const comm::WorkPtr w = comm.irecv(&c, 1, 0, tag);
    while (!w->test()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    w->wait();
  };
  idle_wait(kTagClockGo);
  std::vector<ClockProbe> probes(static_cast<size_t>(round_trips));
  for (auto& p : probes) {
    p.t_send = now_us();
    comm.send(&token, 1, 0, kTagClockPing);
    comm.recv(&p.t_peer, sizeof p.t_peer, 0, kTagClockPong);
    p.t_recv = now_us();
  }
  idle_wait(kTagClockDone);
  return estimate_clock_offset(probes);
}

}  // namespace braid::train
