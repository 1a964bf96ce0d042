#include "braid/parallel/data_parallel/group_buffer.h"

#include <cstring>
#include <memory>

namespace braid::parallel {

Buffer group_buffer(comm::Communicator& group, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                    bool share) {
  if (!share || group.size() < 2 || bytes == 0) return Buffer(bytes, cat, ledger);
  auto sb = std::make_shared<comm::SharedBuffer>(group.alloc_shared(bytes));
  if (!sb->zero_copy()) return Buffer(bytes, cat, ledger);
  std::memset(sb->data(), 0, bytes);  // first touch now, as Buffer does
  void* p = sb->data();
  return Buffer::adopt(p, bytes, cat, ledger, [sb] {});
}

}  // namespace braid::parallel
