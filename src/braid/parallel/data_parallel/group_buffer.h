// Buffers the data-parallel engines reduce or gather through: in memory every rank
// of the group maps when they share a node, so those collectives run zero-copy
// (Communicator::alloc_shared, docs/ARCHITECTURE.md "Zero-copy collectives").
#pragma once
#include <cstddef>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::parallel {

/// Bytes of an engine's collective buffers, and how many of them are shared.
struct SharedBytes {
  size_t shared = 0, total = 0;
  void add(size_t bytes, bool is_shared) {
    total += bytes;
    if (is_shared) shared += bytes;
  }
};

/// `bytes` of zeroed memory, counted in `ledger` under `cat`. With `share` and a
/// group of more than one rank: from group.alloc_shared (collective over the group:
/// every rank calls it with the same bytes), which is private memory when the ranks
/// share no node or the shared-memory file system lacks room. Otherwise a Buffer.
/// `tally`, when given, counts the bytes, and whether they are the group's shared memory.
Buffer group_buffer(comm::Communicator& group, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                    bool share, SharedBytes* tally = nullptr);

/// The start-up log's account of how a data-parallel group of `ranks` moves the
/// bytes of its buffers `b`: "zero-copy ..." when all are shared, "partly
/// zero-copy ..." when some are (each buffer checks the file system's room on its
/// own), else "messages (<why>)" from what was asked (`zero_copy`, `algo`).
/// Empty for a group of one rank.
std::string transport_line(bool zero_copy, comm::Algorithm algo, int ranks, SharedBytes b);

}  // namespace braid::parallel
