// Direct all-gather: every message of the collective posted at once (one round),
// fewer synchronisations than the ring where ranks share cores or messages cost much.
#include <cstring>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void direct_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype) {
  const int n = comm.size(), r = comm.rank();
  const size_t blk = count * dtype_size(dtype);
  if (blk == 0) return;
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(r) * blk;
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) {
    const int src = (r - s + n) % n;
    ws.push_back(comm.irecv(out + static_cast<size_t>(src) * blk, blk, src, kCollectiveTag));
  }
  for (int s = 1; s < n; ++s) ws.push_back(comm.isend(send, blk, (r + s) % n, kCollectiveTag));
  // The local copy overlaps the transfers (the sends read `send`, not `mine`).
  if (static_cast<const std::byte*>(send) != mine) std::memcpy(mine, send, blk);
  for (auto& w : ws) w->wait();
}

const CollectiveAlgorithm kDirectAllGather{"direct_all_gather", Collective::all_gather, run_copying<direct_all_gather>};

}  // namespace braid::comm::algo
