// Faults injected on purpose (--inject-failure-*), so the tests and the
// reliability table can show how a job ends when one rank fails or stalls.
#pragma once
#include <cstdint>

#include "braid/train/options.h"

namespace braid::train {

/// At (opt.inject_failure_rank, opt.inject_failure_step) fails the way
/// opt.inject_failure_kind says: "throw" throws braid::Error ("injected
/// failure on rank R at step S"); "hang" sleeps forever outside any
/// communication; "stop" / "kill" raise SIGSTOP / SIGKILL on the process
/// (after SIGCONT the run carries on). Anywhere else does nothing.
void maybe_inject_failure(const TrainOptions& opt, int rank, int64_t step);

}  // namespace braid::train
