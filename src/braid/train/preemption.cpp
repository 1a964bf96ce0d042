#include "braid/train/preemption.h"

#include <atomic>
#include <csignal>
#include <cstdio>

namespace braid::train {

namespace {
// Process-wide by necessity: signal dispositions belong to the process, and a
// handler can reach nothing but globals. With the local backend every rank
// (thread) reads this one flag; under MPI each process has its own, and the
// ranks agree at step boundaries. Lock-free, so the handler may write it.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);  // keep the first signal
}
}  // namespace

void install_stop_handler() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESETHAND: a second signal of the kind kills, so a stuck job can still
  // be ended. SA_RESTART: interrupted system calls (file I/O) resume.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }

void request_stop(int sig) { on_stop_signal(sig); }

void clear_stop() { g_stop_signal.store(0); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
  }
  static thread_local char buf[32];
  std::snprintf(buf, sizeof buf, "signal %d", sig);
  return buf;
}

}  // namespace braid::train
