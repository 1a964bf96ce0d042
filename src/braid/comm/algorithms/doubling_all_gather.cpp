// Recursive-doubling all-gather: log2 n exchanges of the aligned block ranges held so far.
#include <cstring>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

void doubling_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype) {
  const int n = comm.size(), r = comm.rank();
  BRAID_CHECK((n & (n - 1)) == 0, "recursive doubling needs a power-of-two group, got ", n);
  const size_t blk = count * dtype_size(dtype);
  if (blk == 0) return;
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(r) * blk;
  if (static_cast<const std::byte*>(send) != mine) std::memcpy(mine, send, blk);
  // After round `mask`, rank r holds the aligned range of 2*mask blocks containing r.
  for (int mask = 1; mask < n; mask <<= 1) {
    const int partner = r ^ mask;
    const size_t lo = static_cast<size_t>(r & ~(mask - 1)), plo = static_cast<size_t>(partner & ~(mask - 1));
    comm.sendrecv(out + lo * blk, mask * blk, partner, out + plo * blk, mask * blk, partner,
                  kCollectiveTag);
  }
}

const CollectiveAlgorithm kDoublingAllGather{"doubling_all_gather", Collective::all_gather, run_copying<doubling_all_gather>};

}  // namespace braid::comm::algo
