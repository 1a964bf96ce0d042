// Hierarchical all-gather, even nodes (hierarchical.h): the rail gathers its k blocks
// across nodes, then the ranks of each node exchange those packs, each block
// received straight into its place.
//
// Blocks of more than one chunk (opts.chunk_bytes / L) are pipelined: round t posts
// chunk t's rail exchange (direct and non-blocking, received in place) and, while it
// crosses the link, waits for chunk t-1's and exchanges that chunk inside the node.
#include <cstring>

#include "braid/comm/algorithms/hierarchical.h"

namespace braid::comm::algo {

namespace {

void wait_all(std::vector<WorkPtr>& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

struct Gather {
  Communicator& comm;
  const CollectiveArgs& a;
  const Placement& p;
  size_t esz, k, me, rail_rank;

  // Where elements [begin, ...) of group rank r's block go.
  std::byte* place(int r, size_t begin) const {
    return static_cast<std::byte*>(a.recv) + (static_cast<size_t>(r) * a.count + begin) * esz;
  }
  int member(size_t node, size_t local) const {
    return comm.node_map().members(static_cast<int>(node))[local];
  }

  // Chunk [begin, begin + n) of this rank's block to every rail rank, theirs in place.
  void post_rail(size_t begin, size_t n, std::vector<WorkPtr>& works) const {
    const auto* own = static_cast<const std::byte*>(a.send) + begin * esz;
    std::byte* mine = place(comm.rank(), begin);
    if (mine != own) std::memcpy(mine, own, n * esz);
    for (size_t j = 0; j < k; ++j) {
      if (j == rail_rank) continue;
      works.push_back(comm.irecv(place(p.rail[j], begin), n * esz, p.rail[j], kCollectiveTag));
      works.push_back(comm.isend(mine, n * esz, p.rail[j], kCollectiveTag));
    }
  }

  // The rail's k chunks [begin, begin + n) to the other ranks of the node, theirs in place.
  void exchange_inside(size_t begin, size_t n) const {
    std::vector<WorkPtr> works;
    for (size_t q = 0; q < p.node_ranks.size(); ++q)
      for (size_t j = 0; q != me && j < k; ++j)
        works.push_back(comm.irecv(place(member(j, q), begin), n * esz, p.node_ranks[q], kCollectiveTag));
    for (size_t q = 0; q < p.node_ranks.size(); ++q)
      for (size_t j = 0; q != me && j < k; ++j)
        works.push_back(comm.isend(place(p.rail[j], begin), n * esz, p.node_ranks[q], kCollectiveTag));
    wait_all(works);
  }
};

void run_pipelined(const Gather& g, size_t per) {
  std::vector<WorkPtr> rail[2];
  const size_t chunks = (g.a.count + per - 1) / per;
  auto len = [&](size_t t) { return std::min(per, g.a.count - t * per); };
  for (size_t t = 0; t <= chunks; ++t) {
    if (t < chunks) g.post_rail(t * per, len(t), rail[t % 2]);
    if (t == 0) continue;
    wait_all(rail[(t - 1) % 2]);
    g.exchange_inside((t - 1) * per, len(t - 1));
  }
}

// One chunk: the flat all-gather the selector picks over the rail into a pack, then
// the packs exchanged inside the node.
void run_whole(const Gather& g, Workspace& ws, const RingOptions& opts) {
  const size_t blk = g.a.count * g.esz;
  auto* packed = static_cast<std::byte*>(ws.get(3, g.k * blk + 1));
  GroupView rail(g.comm, g.p.rail);
  run_flat(Collective::all_gather, rail, ws, opts, {g.a.send, packed, g.a.count, g.a.dtype});
  for (size_t j = 0; j < g.k; ++j) std::memcpy(g.place(g.p.rail[j], 0), packed + j * blk, blk);
  g.exchange_inside(0, g.a.count);
}

void run(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const NodeMap& map = comm.node_map();
  const Placement p(comm, static_cast<int>(map.members(0).size()));
  const Gather g{comm, a, p, dtype_size(a.dtype), static_cast<size_t>(map.nodes()), static_cast<size_t>(p.local),
                 static_cast<size_t>(map.node_of(comm.rank()))};
  // A round moves chunk_bytes per local rank of the node's output.
  const size_t per = std::max<size_t>(1, opts.chunk_bytes / (g.esz * p.node_ranks.size()));
  if (a.count > per) return run_pipelined(g, per);
  run_whole(g, ws, opts);
}

}  // namespace

const CollectiveAlgorithm kHierarchicalAllGather{"hierarchical_all_gather", Collective::all_gather, run};

}  // namespace braid::comm::algo
