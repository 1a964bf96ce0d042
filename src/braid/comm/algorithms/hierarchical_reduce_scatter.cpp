// Hierarchical reduce-scatter, even nodes (hierarchical.h): inside each node, local
// rank i gets the node's partial of the blocks of its rail (the k ranks with local
// rank i), packed in node order; then the rail reduce-scatters them.
//
// Blocks of more than one chunk (opts.chunk_bytes / L) are pipelined as the all-reduce is:
// round t reduces chunk t of the rail's blocks inside the node and posts its rail
// exchange (direct and non-blocking: rail rank j gets the node's partial of its own
// block's chunk), while chunk t-1's exchange, posted in the round before, crossed the
// link; then chunk t-1 is finished (this rank's partial first, the other nodes' in
// node order).
#include <cstring>

#include "braid/comm/algorithms/hierarchical.h"
#include "braid/comm/reduce.h"

namespace braid::comm::algo {

namespace {

void wait_all(std::vector<WorkPtr>& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

// The elements [begin, begin + n) of every block: the node's partials of the rail's
// blocks are reduced, in local-rank order, into packed ([node j][n]). scratch holds
// the others' contributions ([local q][node j][stride]).
void reduce_rail_chunk(Communicator& comm, const Placement& p, const CollectiveArgs& a, ReduceOp op, size_t begin,
                       size_t n, std::byte* scratch, size_t stride, std::byte* packed) {
  const NodeMap& map = comm.node_map();
  const auto k = static_cast<size_t>(map.nodes()), L = p.node_ranks.size(), me = static_cast<size_t>(p.local);
  const size_t esz = dtype_size(a.dtype), bytes = n * esz;
  const auto* in = static_cast<const std::byte*>(a.send);
  auto block = [&](int r) { return in + (static_cast<size_t>(r) * a.count + begin) * esz; };
  auto slot = [&](size_t q, size_t j) { return scratch + (q * k + j) * stride; };
  std::vector<WorkPtr> works;
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != me && j < k; ++j) works.push_back(comm.irecv(slot(q, j), bytes, p.node_ranks[q], kCollectiveTag));
  for (size_t q = 0; q < L; ++q)
    for (size_t j = 0; q != me && j < k; ++j)
      works.push_back(comm.isend(block(map.members(static_cast<int>(j))[q]), bytes, p.node_ranks[q], kCollectiveTag));
  wait_all(works);
  for (size_t j = 0; j < k; ++j) {
    auto part = [&](size_t q) -> const std::byte* { return q == me ? block(p.rail[j]) : slot(q, j); };
    std::byte* dst = packed + j * bytes;
    if (L == 1) {
      std::memcpy(dst, part(0), bytes);
      continue;
    }
    reduce_elems(dst, part(0), part(1), n, a.dtype, op);
    for (size_t q = 2; q < L; ++q) reduce_elems(dst, dst, part(q), n, a.dtype, op);
  }
}

// One chunk's rail exchange: the node's partials (packed) out, the other nodes'
// partials of this rank's chunk in (incoming, [node j][n]).
struct RailExchange {
  std::byte* packed = nullptr;
  std::byte* incoming = nullptr;
  size_t begin = 0, n = 0;
  std::vector<WorkPtr> works;
};

void post_rail(Communicator& comm, const Placement& p, size_t esz, RailExchange& x) {
  const size_t bytes = x.n * esz;
  const auto r = static_cast<size_t>(comm.node_map().node_of(comm.rank()));
  for (size_t j = 0; j < p.rail.size(); ++j) {
    if (j == r) continue;
    x.works.push_back(comm.irecv(x.incoming + j * bytes, bytes, p.rail[j], kCollectiveTag));
    x.works.push_back(comm.isend(x.packed + j * bytes, bytes, p.rail[j], kCollectiveTag));
  }
}

void finish_rail(Communicator& comm, const Placement& p, const CollectiveArgs& a, ReduceOp op, RailExchange& x) {
  wait_all(x.works);
  const size_t esz = dtype_size(a.dtype), bytes = x.n * esz;
  const auto r = static_cast<size_t>(comm.node_map().node_of(comm.rank()));
  auto* out = static_cast<std::byte*>(a.recv) + x.begin * esz;
  std::memcpy(out, x.packed + r * bytes, bytes);
  for (size_t j = 0; j < p.rail.size(); ++j)
    if (j != r) reduce_elems(out, out, x.incoming + j * bytes, x.n, a.dtype, op);
  if (a.op == ReduceOp::avg) divide_elems(out, out, x.n, a.dtype, static_cast<float>(comm.size()));
}

void run_pipelined(Communicator& comm, Workspace& ws, const CollectiveArgs& a, const Placement& p, size_t per) {
  const auto k = static_cast<size_t>(comm.node_map().nodes()), L = p.node_ranks.size();
  const size_t esz = dtype_size(a.dtype), stride = per * esz;
  const ReduceOp op = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
  auto* scratch = static_cast<std::byte*>(ws.get(2, L * k * stride + 1));
  auto* packed = static_cast<std::byte*>(ws.get(3, 2 * k * stride + 1));
  auto* incoming = static_cast<std::byte*>(ws.get(1, 2 * k * stride + 1));
  RailExchange x[2];
  const size_t chunks = (a.count + per - 1) / per;
  for (size_t t = 0; t <= chunks; ++t) {
    if (t < chunks) {
      RailExchange& c = x[t % 2];
      c.begin = t * per, c.n = std::min(per, a.count - c.begin);
      c.packed = packed + (t % 2) * k * stride, c.incoming = incoming + (t % 2) * k * stride;
      reduce_rail_chunk(comm, p, a, op, c.begin, c.n, scratch, stride, c.packed);
      post_rail(comm, p, esz, c);
    }
    if (t >= 1) finish_rail(comm, p, a, op, x[(t - 1) % 2]);
  }
}

// One chunk: the node's partials packed, then the flat reduce-scatter the selector
// picks over the rail.
void run_whole(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a,
               const Placement& p) {
  const auto k = static_cast<size_t>(comm.node_map().nodes()), L = p.node_ranks.size();
  const size_t blk = a.count * dtype_size(a.dtype);
  const ReduceOp op = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
  auto* scratch = static_cast<std::byte*>(ws.get(2, L * k * blk + 1));
  auto* packed = static_cast<std::byte*>(ws.get(3, k * blk + 1));
  reduce_rail_chunk(comm, p, a, op, 0, a.count, scratch, blk, packed);
  GroupView rail(comm, p.rail);
  run_flat(Collective::reduce_scatter, rail, ws, opts, {packed, a.recv, a.count, a.dtype, op});
  if (a.op == ReduceOp::avg) divide_elems(a.recv, a.recv, a.count, a.dtype, static_cast<float>(comm.size()));
}

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const Placement p(comm, static_cast<int>(comm.node_map().members(0).size()));
  // A round moves chunk_bytes per local rank of the node's input.
  const size_t per = std::max<size_t>(1, opts.chunk_bytes / (dtype_size(a.dtype) * p.node_ranks.size()));
  if (a.count > per) return run_pipelined(comm, ws, a, p, per);
  run_whole(comm, ws, opts, a, p);
}

}  // namespace

const CollectiveAlgorithm kHierarchicalReduceScatter{"hierarchical_reduce_scatter", Collective::reduce_scatter, run};

}  // namespace braid::comm::algo
