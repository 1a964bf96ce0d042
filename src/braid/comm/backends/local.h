// Local backend: every rank is a thread of this process. Messages go through per-
// destination mailboxes keyed by (source, tag): a send copies straight into a posted
// receive when one is waiting, else into a buffered message (so sends never block).
// Used by tests and by `braid bench-comm --local N`.
#pragma once
#include <functional>

#include "braid/comm/communicator.h"

namespace braid::comm {

/// Runs fn(comm) on world_size threads, one Communicator per rank, and joins them.
/// If any rank throws, the world is aborted: every rank blocked in a receive / wait
/// (or blocking later) throws braid::Error("aborted: rank R failed: <what>"). After all
/// threads are joined the first failure is rethrown as braid::Error("rank R: <what>").
/// Every rank has a monitor (watchdog.h) with `options`: a wait longer than
/// options.timeout_s fails the job naming the ranks that never reached the operation.
/// Errors: ConfigError when world_size < 1 or the timeout is not positive.
void run_local(int world_size, const std::function<void(Communicator&)>& fn,
               const CommOptions& options = {});
/// The same with ranks placed on nodes as `nodes` says (world size = nodes.world()):
/// groups that span its nodes take the hierarchical collectives, as they would on
/// hosts with that placement (and their shared buffers are private memory).
void run_local(const NodeMap& nodes, const std::function<void(Communicator&)>& fn,
               const CommOptions& options = {});

}  // namespace braid::comm
