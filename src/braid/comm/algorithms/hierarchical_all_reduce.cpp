// Hierarchical all-reduce (hierarchical.h): slices reduced to their owners inside
// each node, all-reduced across nodes along each rail, gathered inside each node.
//
// A buffer of more than one chunk (opts.chunk_bytes per slice) is pipelined so the
// link never waits for a node's own work: in round t the node reduces chunk t to its
// owners while chunk t-1 crosses the link (its rail reduce-scatter ends and its rail
// all-gather starts) and chunk t-2 finishes (its rail all-gather is waited for and its
// slices are gathered inside the node). The rail steps are direct and non-blocking:
// owner r of a rail of k sends sub-slice j of its slice to rail rank j, reduces its own
// sub-slice (its own part first, then the others in node order) and sends the result
// to every rail rank, (k-1)/k of the slice each way per step, as the ring moves.
#include <array>

#include "braid/comm/algorithms/hierarchical.h"
#include "braid/comm/reduce.h"

namespace braid::comm::algo {

namespace {

// One chunk's rail step on an owner: its slice's place and sub-slices, and the
// messages in flight.
struct RailChunk {
  std::byte* slice = nullptr;         // this owner's slice of the chunk, in the output
  std::vector<size_t> off, len;       // sub-slice j of the slice (elements)
  std::byte* incoming = nullptr;      // the others' parts of this rank's sub-slice
  std::vector<WorkPtr> works;
};

struct Pipeline {
  Communicator& comm;
  Workspace& ws;
  const CollectiveArgs& a;
  const Placement& p;
  ReduceOp op;             // sum for avg (divided once, on the sub-slice's owner)
  int m;                   // slices per chunk (owners per node)
  size_t chunk_elems;      // elements per chunk (m slices)
  size_t esz;
  int rail_rank = -1;      // this rank's place in its rail (its node), -1 without one
  std::array<RailChunk, 3> rail;
  std::byte* rs_buf[2] = {nullptr, nullptr};
  size_t rs_stride = 0;

  size_t chunk_begin(size_t t) const { return t * chunk_elems; }
  size_t chunk_count(size_t t) const { return std::min(chunk_elems, a.count - chunk_begin(t)); }
  std::byte* out(size_t t) const { return static_cast<std::byte*>(a.recv) + chunk_begin(t) * esz; }

  void slices(size_t t, std::vector<size_t>& off, std::vector<size_t>& len) const {
    split_slices(chunk_count(t), m, off, len);
  }

  // Round t's first step: chunk t reduced to its owners inside the node, then (on an
  // owner) its rail reduce-scatter posted.
  void reduce_inside_and_post(size_t t) {
    std::vector<size_t> off, len;
    slices(t, off, len);
    reduce_slices_to_owners(comm, ws, p, static_cast<const std::byte*>(a.send) + chunk_begin(t) * esz, out(t), off,
                            len, a.dtype, op);
    if (rail_rank < 0) return;
    RailChunk& c = rail[t % 3];
    const auto me = static_cast<size_t>(p.local);
    c.slice = out(t) + off[me] * esz;
    split_slices(len[me], static_cast<int>(p.rail.size()), c.off, c.len);
    c.incoming = rs_buf[t % 2];
    c.works.clear();
    const size_t mine = c.len[static_cast<size_t>(rail_rank)] * esz;
    for (size_t j = 0; j < p.rail.size(); ++j) {
      if (static_cast<int>(j) == rail_rank) continue;
      c.works.push_back(comm.irecv(c.incoming + j * rs_stride, mine, p.rail[j], kCollectiveTag));
      c.works.push_back(comm.isend(c.slice + c.off[j] * esz, c.len[j] * esz, p.rail[j], kCollectiveTag));
    }
  }

  // Round t+1: chunk t's sub-slice reduced here and sent to every rail rank, the
  // others' sub-slices received in place.
  void reduce_across_and_post(size_t t) {
    RailChunk& c = rail[t % 3];
    for (auto& w : c.works) w->wait();
    c.works.clear();
    const auto r = static_cast<size_t>(rail_rank);
    std::byte* mine = c.slice + c.off[r] * esz;
    for (size_t j = 0; j < p.rail.size(); ++j)
      if (j != r) reduce_elems(mine, mine, c.incoming + j * rs_stride, c.len[r], a.dtype, op);
    if (a.op == ReduceOp::avg) divide_elems(mine, mine, c.len[r], a.dtype, static_cast<float>(comm.size()));
    for (size_t j = 0; j < p.rail.size(); ++j) {
      if (j == r) continue;
      c.works.push_back(comm.irecv(c.slice + c.off[j] * esz, c.len[j] * esz, p.rail[j], kCollectiveTag));
      c.works.push_back(comm.isend(mine, c.len[r] * esz, p.rail[j], kCollectiveTag));
    }
  }

  // Round t+2: chunk t complete on its owners, then gathered inside the node.
  void finish(size_t t) {
    if (rail_rank >= 0) {
      for (auto& w : rail[t % 3].works) w->wait();
      rail[t % 3].works.clear();
    }
    std::vector<size_t> off, len;
    slices(t, off, len);
    gather_slices_from_owners(comm, p, out(t), off, len, a.dtype);
  }
};

// per_slice: elements of one slice of a chunk.
void run_pipelined(Communicator& comm, Workspace& ws, const CollectiveArgs& a, int m, size_t per_slice,
                   const Placement& p) {
  const size_t esz = dtype_size(a.dtype);
  const ReduceOp op = a.op == ReduceOp::avg ? ReduceOp::sum : a.op;
  const int rail_rank = p.rail.empty() ? -1 : comm.node_map().node_of(comm.rank());
  Pipeline pl{comm, ws, a, p, op, m, per_slice * static_cast<size_t>(m), esz, rail_rank, {}, {nullptr, nullptr}, 0};
  // Two chunks' incoming sub-slices in flight: k slots of the largest sub-slice each.
  const size_t k = std::max<size_t>(1, p.rail.size());
  pl.rs_stride = ((per_slice + k - 1) / k + 1) * esz;
  auto* buf = static_cast<std::byte*>(ws.get(3, 2 * k * pl.rs_stride + 1));
  pl.rs_buf[0] = buf;
  pl.rs_buf[1] = buf + k * pl.rs_stride;
  const size_t chunks = (a.count + pl.chunk_elems - 1) / pl.chunk_elems;
  for (size_t t = 0; t < chunks + 2; ++t) {
    if (t < chunks) pl.reduce_inside_and_post(t);
    if (t >= 1 && t - 1 < chunks && pl.rail_rank >= 0) pl.reduce_across_and_post(t - 1);
    if (t >= 2) pl.finish(t - 2);
  }
}

// One chunk: the three phases in turn, the rail on the flat algorithm the selector picks.
void run_whole(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a, int m,
               const Placement& p) {
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

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const int m = comm.node_map().min_local();
  const Placement p(comm, m);
  const size_t per_slice = std::max<size_t>(1, opts.chunk_bytes / dtype_size(a.dtype));
  if (a.count > per_slice * static_cast<size_t>(m)) return run_pipelined(comm, ws, a, m, per_slice, p);
  run_whole(comm, ws, opts, a, m, p);
}

}  // namespace

const CollectiveAlgorithm kHierarchicalAllReduce{"hierarchical_all_reduce", Collective::all_reduce, run};

}  // namespace braid::comm::algo
