#include <algorithm>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

void* Workspace::get(int slot, size_t bytes) {
  BRAID_CHECK(slot >= 0 && slot < 4, "workspace slot ", slot);
  Buffer& b = bufs_[slot];
  if (b.bytes() < bytes || !b.data()) b = Buffer(std::max<size_t>(bytes, 64), MemCategory::comm, ledger_);
  return b.data();
}

}  // namespace braid::comm::algo
