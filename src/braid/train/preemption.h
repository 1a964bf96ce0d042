// Graceful stop on a signal: cluster schedulers preempt a job with SIGTERM
// (Slurm, Kubernetes), a user interrupts it with Ctrl-C (SIGINT), and mpirun
// forwards SIGUSR1 to every rank (it turns SIGTERM and SIGINT into a kill of
// the job instead). The handler only records the signal; the trainer polls it
// at each step boundary and the ranks agree on it there (Trainer::run).
//
// Where the handler runs matters: oneDNN 2.x's JIT f32 GEMM (gemm:jit, AVX2
// and AVX-512) points rsp at a heap workspace while it runs, so a signal
// handled on a thread inside it writes its signal frame (about 2.7 KiB of
// AVX-512 state plus the registers) over the heap chunk before that workspace,
// and the process later aborts in free() ("corrupted size vs. prev_size").
// oneDNN issue 4845, fixed in 3.11.2; Debian 12 ships 2.7. StopSignalThread therefore routes the stop signals to
// one thread that runs no kernels.
#pragma once

#include <csignal>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace braid::train {

/// Routes SIGTERM, SIGINT and SIGUSR1 to a thread of their own. The constructor
/// blocks them in the calling thread, so every thread created after it (OpenMP's
/// team, MPI's progress threads, the communicators' threads, the local backend's
/// ranks) inherits the block, and starts one thread that unblocks them and
/// sleeps: the kernel delivers a process-directed signal to a thread that does
/// not block it, so this thread alone runs the handler (install_stop_handler),
/// or, with the default action, the process ends as it would without it.
/// Construct it first in main, before any other thread exists; a thread created
/// earlier keeps its own mask. A signal sent to one thread (pthread_kill, raise)
/// stays pending on it. The destructor joins the thread and restores the
/// calling thread's mask. Throws std::system_error if the thread cannot start.
class StopSignalThread {
 public:
  StopSignalThread();
  ~StopSignalThread();
  StopSignalThread(const StopSignalThread&) = delete;
  StopSignalThread& operator=(const StopSignalThread&) = delete;

 private:
  sigset_t saved_mask_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

/// Installs the stop handler for SIGTERM, SIGINT and SIGUSR1 (again: re-arms it).
/// Only the first signal of each kind is caught: a second one takes its
/// default action and ends the process at once (e.g. a second Ctrl-C).
void install_stop_handler();

/// The first stop signal this process received (SIGTERM, ...), or 0 if none.
int stop_signal();

/// Records `sig` as if it had been delivered; callable from any thread (tests).
void request_stop(int sig);

/// Forgets a recorded stop, so a later run in this process trains (tests).
void clear_stop();

/// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char* stop_signal_name(int sig);

}  // namespace braid::train
