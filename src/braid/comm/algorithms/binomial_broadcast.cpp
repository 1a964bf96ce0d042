// Binomial-tree broadcast: in round `mask` the ranks vr < mask (which hold the data)
// send to vr + mask; log2(n) rounds.
#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void binomial_broadcast(Communicator& comm, void* buf, size_t bytes, int root) {
  const int vr = broadcast_rank(comm, root);
  auto* p = static_cast<std::byte*>(buf);
  const int n = comm.size();
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr < mask) {
      if (vr + mask < n) comm.send(p, bytes, (vr + mask + root) % n, kCollectiveTag);
    } else if (vr < 2 * mask) {
      comm.recv(p, bytes, (vr - mask + root) % n, kCollectiveTag);
    }
  }
}

const CollectiveAlgorithm kBinomialBroadcast{"binomial_broadcast", Collective::broadcast, run_broadcast<binomial_broadcast>};

}  // namespace braid::comm::algo
