// Graceful stop on a signal: cluster schedulers preempt a job with SIGTERM
// (Slurm, Kubernetes), a user interrupts it with Ctrl-C (SIGINT), and mpirun
// forwards SIGUSR1 to every rank (it turns SIGTERM and SIGINT into a kill of
// the job instead). The handler only records the signal; the trainer polls it
// at each step boundary and the ranks agree on it there (Trainer::run).
#pragma once

namespace braid::train {

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
