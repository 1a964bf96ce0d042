#include "braid/train/preemption.h"

#include <pthread.h>

#include <atomic>
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

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  return set;
}
}  // namespace

StopSignalThread::StopSignalThread() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, &saved_mask_);
  try {
    thread_ = std::thread([this, set] {
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      // The handler interrupts this wait and the wait resumes (SA_RESTART).
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return quit_; });
    });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
    throw;
  }
}

StopSignalThread::~StopSignalThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_one();
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

void install_stop_handler() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESETHAND: a second signal of the kind kills, so a stuck job can still
  // be ended. SA_RESTART: interrupted system calls (file I/O) resume.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
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
