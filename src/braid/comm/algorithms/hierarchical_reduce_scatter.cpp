// Hierarchical reduce-scatter, even nodes (hierarchical.h): inside each node, local
// rank i gets the node's partial of the blocks of its rail (the k ranks with local
// rank i), packed in node order; then the rail reduce-scatters them.
#include <cstring>

#include "braid/comm/algorithms/hierarchical.h"
#include "braid/comm/reduce.h"

namespace braid::comm::algo {

namespace {

// Local rank q's contribution to this rank's pack arrives as k messages, block j being
// the block of the rank with local rank p.local on node j.
void reduce_rail_blocks(Communicator& comm, Workspace& ws, const Placement& p, const CollectiveArgs& a,
                        ReduceOp op, std::byte* packed) {
  const NodeMap& map = comm.node_map();
  const auto k = static_cast<size_t>(map.nodes()), L = p.node_ranks.size();
  const size_t blk = a.count * dtype_size(a.dtype);
  const auto* in = static_cast<const std::byte*>(a.send);
  auto* scratch = static_cast<std::byte*>(ws.get(2, L * k * blk + 1));  // [local q][node j]
  std::vector<WorkPtr> works;
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != static_cast<size_t>(p.local) && j < k; ++j)
      works.push_back(comm.irecv(scratch + (q * k + j) * blk, blk, p.node_ranks[q], kCollectiveTag));
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != static_cast<size_t>(p.local) && j < k; ++j) {
      const int dest_block = map.members(static_cast<int>(j))[q];
      works.push_back(comm.isend(in + static_cast<size_t>(dest_block) * blk, blk, p.node_ranks[q], kCollectiveTag));
    }
  for (auto& w : works) w->wait();
  const auto me = static_cast<size_t>(p.local);
  for (size_t j = 0; j < k; ++j)
    std::memcpy(scratch + (me * k + j) * blk, in + static_cast<size_t>(p.rail[j]) * blk, blk);
  const size_t n = k * a.count;
  if (L == 1) return void(std::memcpy(packed, scratch, k * blk));
  reduce_elems(packed, scratch, scratch + k * blk, n, a.dtype, op);
  for (size_t q = 2; q < L; ++q) reduce_elems(packed, packed, scratch + q * k * blk, n, a.dtype, op);
}

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const Placement p(comm, static_cast<int>(comm.node_map().members(0).size()));
  const ReduceOp op = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
  auto* packed = static_cast<std::byte*>(
      ws.get(3, static_cast<size_t>(comm.node_map().nodes()) * a.count * dtype_size(a.dtype) + 1));
  reduce_rail_blocks(comm, ws, p, a, op, packed);
  GroupView rail(comm, p.rail);
  run_flat(Collective::reduce_scatter, rail, ws, opts, {packed, a.recv, a.count, a.dtype, op});
  if (a.op == ReduceOp::avg) divide_elems(a.recv, a.recv, a.count, a.dtype, static_cast<float>(comm.size()));
}

}  // namespace

const CollectiveAlgorithm kHierarchicalReduceScatter{"hierarchical_reduce_scatter", Collective::reduce_scatter, run};

}  // namespace braid::comm::algo
