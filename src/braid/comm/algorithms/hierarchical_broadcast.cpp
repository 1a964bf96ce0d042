// Hierarchical broadcast (hierarchical.h), any node map: the root sends to one leader
// per node (itself on its own node, local rank 0 on the others), so the buffer
// crosses the link once per node; each leader then broadcasts inside its node.
#include "braid/comm/algorithms/hierarchical.h"

namespace braid::comm::algo {

namespace {

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const NodeMap& map = comm.node_map();
  broadcast_rank(comm, a.root);  // checks the root
  const int root_node = map.node_of(a.root);
  std::vector<int> leaders;
  for (int j = 0; j < map.nodes(); ++j) leaders.push_back(j == root_node ? a.root : map.members(j)[0]);
  const Placement p(comm, 0);
  const int leader = leaders[static_cast<size_t>(p.node)];
  if (comm.rank() == leader) {
    GroupView across(comm, leaders);
    run_flat(Collective::broadcast, across, ws, opts, {.recv = a.recv, .count = a.count, .dtype = a.dtype, .root = root_node});
  }
  GroupView inside(comm, p.node_ranks);
  run_flat(Collective::broadcast, inside, ws, opts,
           {.recv = a.recv, .count = a.count, .dtype = a.dtype, .root = map.local_rank(leader)});
}

}  // namespace

const CollectiveAlgorithm kHierarchicalBroadcast{"hierarchical_broadcast", Collective::broadcast, run};

}  // namespace braid::comm::algo
