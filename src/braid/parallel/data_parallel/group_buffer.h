// Buffers the data-parallel engines reduce or gather through: in memory every rank
// of the group maps when they share a node, so those collectives run zero-copy
// (Communicator::alloc_shared, docs/ARCHITECTURE.md "Zero-copy collectives").
#pragma once
#include <cstddef>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::parallel {

/// `bytes` of zeroed memory, counted in `ledger` under `cat`. With `share` and a
/// group of more than one rank: from group.alloc_shared (collective over the group:
/// every rank calls it with the same bytes), which is private memory when the ranks
/// share no node or the shared-memory file system lacks room. Otherwise a Buffer.
Buffer group_buffer(comm::Communicator& group, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                    bool share);

}  // namespace braid::parallel
