// Scatter + all-gather broadcast (van de Geijn): the root sends piece k of n-1 to
// non-root vr = k+1, which then sends it to every other non-root (all messages posted
// at once). The root sends the buffer once; each non-root receives it once.
#include <algorithm>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void scatter_allgather_broadcast(Communicator& comm, void* buf, size_t bytes, int root) {
  const int vr = broadcast_rank(comm, root);
  auto* p = static_cast<std::byte*>(buf);
  const int n = comm.size(), m = n - 1;
  auto piece = [&](int k, size_t& o, size_t& l) {  // uneven split of bytes into m pieces
    const size_t base = bytes / m, rem = bytes % m;
    const size_t kk = static_cast<size_t>(k);
    o = kk * base + std::min(kk, rem);
    l = base + (kk < rem ? 1 : 0);
  };
  auto real = [&](int v) { return (v + root) % n; };
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  size_t o, l;
  if (vr == 0) {
    for (int k = 0; k < m; ++k) {
      piece(k, o, l);
      if (l) ws.push_back(comm.isend(p + o, l, real(k + 1), kCollectiveTag));
    }
  } else {
    const int me = vr - 1;
    piece(me, o, l);
    WorkPtr mine = l ? comm.irecv(p + o, l, root, kCollectiveTag) : nullptr;
    for (int s = 1; s < m; ++s) {
      const int k = (me - s + m) % m;
      piece(k, o, l);
      if (l) ws.push_back(comm.irecv(p + o, l, real(k + 1), kCollectiveTag));
    }
    if (mine) {
      mine->wait();
      piece(me, o, l);
      for (int s = 1; s < m; ++s) ws.push_back(comm.isend(p + o, l, real((me + s) % m + 1), kCollectiveTag));
    }
  }
  for (auto& w : ws) w->wait();
}

const CollectiveAlgorithm kScatterAllGatherBroadcast{"scatter_allgather_broadcast", Collective::broadcast, run_broadcast<scatter_allgather_broadcast>};

}  // namespace braid::comm::algo
