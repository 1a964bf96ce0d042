// Direct all-to-all: every receive and send posted at once (one round).
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void direct_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype) {
  const AllToAllBlocks b(comm, send, recv, count, dtype);
  if (b.blk == 0) return;
  if (b.n == 1) return b.copy_own();
  const int n = b.n, r = b.r;
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) {
    const int src = (r - s + n) % n;
    ws.push_back(comm.irecv(b.out_block(src), b.blk, src, kCollectiveTag));
  }
  for (int s = 1; s < n; ++s) {
    const int dst = (r + s) % n;
    ws.push_back(comm.isend(b.in_block(dst), b.blk, dst, kCollectiveTag));
  }
  b.copy_own();
  for (auto& w : ws) w->wait();
}

const CollectiveAlgorithm kDirectAllToAll{"direct_all_to_all", Collective::all_to_all, run_copying<direct_all_to_all>};

}  // namespace braid::comm::algo
