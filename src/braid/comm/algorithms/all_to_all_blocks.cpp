// The block layout every all-to-all algorithm shares.
#include <cstring>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

AllToAllBlocks::AllToAllBlocks(Communicator& comm, const void* send, void* recv, size_t count, DType dtype)
    : n(comm.size()), r(comm.rank()), blk(count * dtype_size(dtype)), in(static_cast<const std::byte*>(send)),
      out(static_cast<std::byte*>(recv)) {
  BRAID_CHECK(blk == 0 || in + n * blk <= out || out + n * blk <= in, "all_to_all buffers overlap");
}

void AllToAllBlocks::copy_own() const {
  if (blk > 0) std::memcpy(out_block(r), in_block(r), blk);
}

}  // namespace braid::comm::algo
