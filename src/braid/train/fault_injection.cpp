#include "braid/train/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <unistd.h>

#include "braid/core/error.h"

namespace braid::train {

void maybe_inject_failure(const TrainOptions& opt, int rank, int64_t step) {
  if (opt.inject_failure_rank != rank || opt.inject_failure_step != step) return;
  const std::string& kind = opt.inject_failure_kind;
  if (kind == "hang") {
    std::fprintf(stderr, "braid: rank %d: injected hang at step %lld\n", rank, (long long)step);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (kind == "stop" || kind == "kill") {
    std::fprintf(stderr, "braid: rank %d (pid %d): injected %s at step %lld\n", rank, static_cast<int>(getpid()),
                 kind == "stop" ? "SIGSTOP" : "SIGKILL", (long long)step);
    std::fflush(stderr);
    raise(kind == "stop" ? SIGSTOP : SIGKILL);
    return;  // continued (SIGCONT): carry on like a process that was only frozen
  }
  throw Error(detail::concat("injected failure on rank ", rank, " at step ", step));
}

}  // namespace braid::train
