// Hierarchical all-gather, even nodes (hierarchical.h): the rail gathers its k blocks
// across nodes, then the ranks of each node exchange those packs, each block
// received straight into its place.
#include <cstring>

#include "braid/comm/algorithms/hierarchical.h"

namespace braid::comm::algo {

namespace {

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const NodeMap& map = comm.node_map();
  const auto k = static_cast<size_t>(map.nodes());
  const Placement p(comm, static_cast<int>(map.members(0).size()));
  const size_t blk = a.count * dtype_size(a.dtype);
  auto* packed = static_cast<std::byte*>(ws.get(3, k * blk + 1));
  GroupView rail(comm, p.rail);
  run_flat(Collective::all_gather, rail, ws, opts, {a.send, packed, a.count, a.dtype});
  auto* out = static_cast<std::byte*>(a.recv);
  auto place = [&](size_t j, size_t q) { return out + static_cast<size_t>(map.members(static_cast<int>(j))[q]) * blk; };
  const auto me = static_cast<size_t>(p.local), L = p.node_ranks.size();
  std::vector<WorkPtr> works;
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != me && j < k; ++j)
      works.push_back(comm.irecv(place(j, q), blk, p.node_ranks[q], kCollectiveTag));
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != me && j < k; ++j)
      works.push_back(comm.isend(packed + j * blk, blk, p.node_ranks[q], kCollectiveTag));
  for (size_t j = 0; j < k; ++j) std::memcpy(place(j, me), packed + j * blk, blk);
  for (auto& w : works) w->wait();
}

}  // namespace

const CollectiveAlgorithm kHierarchicalAllGather{"hierarchical_all_gather", Collective::all_gather, run};

}  // namespace braid::comm::algo
