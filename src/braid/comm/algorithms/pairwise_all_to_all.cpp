// Pairwise-exchange all-to-all (Thakur et al. 2005): n-1 sendrecv rounds.
#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void pairwise_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype) {
  const AllToAllBlocks b(comm, send, recv, count, dtype);
  b.copy_own();
  for (int s = 1; s < b.n && b.blk > 0; ++s) {
    const int dst = (b.r + s) % b.n, src = (b.r - s + b.n) % b.n;
    comm.sendrecv(b.in_block(dst), b.blk, dst, b.out_block(src), b.blk, src, kCollectiveTag);
  }
}

const CollectiveAlgorithm kPairwiseAllToAll{"pairwise_all_to_all", Collective::all_to_all, run_copying<pairwise_all_to_all>};

}  // namespace braid::comm::algo
