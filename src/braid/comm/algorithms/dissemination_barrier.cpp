// Dissemination barrier (Hensgen, Finkel & Manber 1988).
#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

void dissemination_barrier(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  char s = 0, x = 0;
  for (int k = 1; k < n; k <<= 1)
    comm.sendrecv(&s, 1, (r + k) % n, &x, 1, (r - k + n) % n, kCollectiveTag);
}

const CollectiveAlgorithm kDisseminationBarrier{
    "dissemination_barrier", Collective::barrier,
    [](Communicator& c, Workspace&, const RingOptions&, const CollectiveArgs&) {
      dissemination_barrier(c);
    }};

}  // namespace braid::comm::algo
