// What every broadcast shares: the root's check and each rank's place relative to it;
// and the broadcast with nothing to send (one rank, or zero bytes).
#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

int broadcast_rank(Communicator& comm, int root) {
  const int n = comm.size();
  BRAID_CHECK(root >= 0 && root < n, "broadcast root ", root, " outside group of ", n);
  return (comm.rank() - root + n) % n;
}

const CollectiveAlgorithm kNoBroadcast{
    "no_broadcast", Collective::broadcast,
    [](Communicator& c, Workspace&, const RingOptions&, const CollectiveArgs& a) { broadcast_rank(c, a.root); }};

}  // namespace braid::comm::algo
