// Pipelined chain broadcast root -> root+1 -> ...: each chunk is forwarded as soon as
// it arrives, so time ~ (chunks + n - 2) chunk transfers.
#include <algorithm>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void chain_broadcast(Communicator& comm, void* buf, size_t bytes, size_t chunk_bytes, int root) {
  const int vr = broadcast_rank(comm, root);
  auto* p = static_cast<std::byte*>(buf);
  const int n = comm.size(), r = comm.rank();
  const size_t C = std::max<size_t>(chunk_bytes, 1);
  const size_t nch = (bytes + C - 1) / C;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const bool last = vr == n - 1;
  std::vector<WorkPtr> sends, recvs;
  if (vr == 0) {
    for (size_t i = 0; i < nch; ++i) sends.push_back(comm.isend(p + i * C, std::min(C, bytes - i * C), next, kCollectiveTag));
  } else {
    for (size_t i = 0; i < nch; ++i) recvs.push_back(comm.irecv(p + i * C, std::min(C, bytes - i * C), prev, kCollectiveTag));
    for (size_t i = 0; i < nch; ++i) {
      recvs[i]->wait();
      if (!last) sends.push_back(comm.isend(p + i * C, std::min(C, bytes - i * C), next, kCollectiveTag));
    }
  }
  for (auto& w : sends) w->wait();
}

const CollectiveAlgorithm kChainBroadcast{
    "chain_broadcast", Collective::broadcast,
    [](Communicator& c, Workspace&, const RingOptions& o, const CollectiveArgs& a) {
      chain_broadcast(c, a.recv, a.count * dtype_size(a.dtype), o.chunk_bytes, a.root);
    }};

}  // namespace braid::comm::algo
