#include "braid/parallel/data_parallel/group_buffer.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace braid::parallel {

Buffer group_buffer(comm::Communicator& group, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                    bool share, SharedBytes* tally) {
  std::shared_ptr<comm::SharedBuffer> sb;
  if (share && group.size() > 1 && bytes > 0) sb = std::make_shared<comm::SharedBuffer>(group.alloc_shared(bytes));
  const bool shared = sb && sb->zero_copy();
  if (tally) tally->add(bytes, shared);
  if (!shared) return Buffer(bytes, cat, ledger);
  std::memset(sb->data(), 0, bytes);  // first touch now, as Buffer does
  void* p = sb->data();
  return Buffer::adopt(p, bytes, cat, ledger, [sb] {});
}

std::string transport_line(bool zero_copy, comm::Algorithm algo, int ranks, SharedBytes b) {
  if (ranks < 2) return {};
  if (b.total > 0 && b.shared == b.total)
    return "zero-copy through shared memory (" + std::to_string(ranks) + " ranks on one node)";
  if (b.shared > 0) {
    char part[160];
    std::snprintf(part, sizeof(part), "partly zero-copy: %.1f of %.1f MiB of buffers in shared memory, the rest by messages",
                  double(b.shared) / (1 << 20), double(b.total) / (1 << 20));
    return std::string(part) + " (the shared-memory file system lacks room for all)";
  }
  if (!zero_copy) return "messages (--no-zero-copy)";
  if (algo != comm::Algorithm::ring) return "messages (zero-copy runs with --comm-algo ring only)";
  return "messages (no shared memory: the ranks span nodes, or the shared-memory file system lacks room)";
}

}  // namespace braid::parallel
