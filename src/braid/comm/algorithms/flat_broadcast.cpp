// Flat-tree broadcast: one round, every receiver pulls the whole buffer from the root.
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void flat_broadcast(Communicator& comm, void* buf, size_t bytes, int root) {
  const int vr = broadcast_rank(comm, root);
  auto* p = static_cast<std::byte*>(buf);
  const int n = comm.size();
  if (vr != 0) {
    comm.recv(p, bytes, root, kCollectiveTag);
    return;
  }
  std::vector<WorkPtr> ws;
  ws.reserve(static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) ws.push_back(comm.isend(p, bytes, (root + s) % n, kCollectiveTag));
  for (auto& w : ws) w->wait();
}

const CollectiveAlgorithm kFlatBroadcast{"flat_broadcast", Collective::broadcast, run_broadcast<flat_broadcast>};

}  // namespace braid::comm::algo
