// Hierarchical all-reduce (hierarchical.h): slices reduced to their owners inside
// each node, all-reduced across nodes along each rail, gathered inside each node.
#include "braid/comm/algorithms/hierarchical.h"
#include "braid/comm/reduce.h"

namespace braid::comm::algo {

namespace {

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const int m = comm.node_map().min_local();
  const Placement p(comm, m);
  std::vector<size_t> off, len;
  split_slices(a.count, m, off, len);
  // avg: sums all the way, one division by the group size on the owner.
  const ReduceOp op = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
  reduce_slices_to_owners(comm, ws, p, a.send, a.recv, off, len, a.dtype, op);
  if (p.local < m) {
    const auto me = static_cast<size_t>(p.local);
    void* slice = static_cast<std::byte*>(a.recv) + off[me] * dtype_size(a.dtype);
    GroupView rail(comm, p.rail);
    run_flat(Collective::all_reduce, rail, ws, opts, {slice, slice, len[me], a.dtype, op});
    if (a.op == ReduceOp::avg) divide_elems(slice, slice, len[me], a.dtype, static_cast<float>(comm.size()));
  }
  gather_slices_from_owners(comm, p, a.recv, off, len, a.dtype);
}

}  // namespace

const CollectiveAlgorithm kHierarchicalAllReduce{"hierarchical_all_reduce", Collective::all_reduce, run};

}  // namespace braid::comm::algo
