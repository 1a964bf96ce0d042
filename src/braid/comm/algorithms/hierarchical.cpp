// GroupView, the placement of a rank in its node map, and the intra-node phases
// (hierarchical.h).
#include "braid/comm/algorithms/hierarchical.h"

#include <algorithm>
#include <cstring>

#include "braid/comm/reduce.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

GroupView::GroupView(Communicator& parent, std::vector<int> members)
    : parent_(parent), members_(std::move(members)), map_(NodeMap::one_node(static_cast<int>(members_.size()))) {
  const auto it = std::find(members_.begin(), members_.end(), parent.rank());
  BRAID_CHECK(it != members_.end(), "group view: rank ", parent.rank(), " is not one of its members");
  rank_ = static_cast<int>(it - members_.begin());
}

void GroupView::unsupported(const char* what) {
  throw Error(std::string("group view: ") + what + " is not offered (run the algorithm over the view)");
}

void GroupView::send(const void* buf, size_t bytes, int p, int tag) { parent_.send(buf, bytes, peer(p), tag); }
void GroupView::recv(void* buf, size_t bytes, int p, int tag) { parent_.recv(buf, bytes, peer(p), tag); }
WorkPtr GroupView::isend(const void* buf, size_t bytes, int p, int tag) {
  return parent_.isend(buf, bytes, peer(p), tag);
}
WorkPtr GroupView::irecv(void* buf, size_t bytes, int p, int tag) { return parent_.irecv(buf, bytes, peer(p), tag); }
void GroupView::sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src, int tag) {
  parent_.sendrecv(sbuf, sbytes, peer(dst), rbuf, rbytes, peer(src), tag);
}

Placement::Placement(const Communicator& comm, int slices) {
  const NodeMap& map = comm.node_map();
  node = map.node_of(comm.rank());
  local = map.local_rank(comm.rank());
  node_ranks = map.members(node);
  if (local < slices)
    for (int j = 0; j < map.nodes(); ++j) rail.push_back(map.members(j)[static_cast<size_t>(local)]);
}

void run_flat(Collective op, GroupView& view, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a) {
  const CollectiveShape shape{op, a.count, dtype_size(a.dtype), view.size(), {}};
  select_algorithm(shape, opts).run(view, ws, opts, a);
}

void split_slices(size_t count, int m, std::vector<size_t>& off, std::vector<size_t>& len) {
  const auto n = static_cast<size_t>(m);
  off.assign(n, 0);
  len.assign(n, count / n);
  for (size_t s = 0; s < n; ++s) {
    if (s < count % n) ++len[s];
    if (s > 0) off[s] = off[s - 1] + len[s - 1];
  }
}

namespace {
void wait_all(std::vector<WorkPtr>& works) {
  for (auto& w : works) w->wait();
}
}  // namespace

void reduce_slices_to_owners(Communicator& comm, Workspace& ws, const Placement& p, const void* send, void* out,
                             const std::vector<size_t>& off, const std::vector<size_t>& len, DType dtype,
                             ReduceOp op) {
  const size_t esz = dtype_size(dtype);
  const auto L = p.node_ranks.size();
  const auto m = static_cast<int>(off.size());
  const auto* in = static_cast<const std::byte*>(send);
  const bool owner = p.local < m;
  const size_t seg = owner ? len[static_cast<size_t>(p.local)] * esz : 0;
  // Slot q holds local rank q's contribution to this rank's slice.
  auto* scratch = owner ? static_cast<std::byte*>(ws.get(2, seg * L + 1)) : nullptr;
  std::vector<WorkPtr> works;
  for (size_t q = 0; owner && q < L; ++q)
    if (static_cast<int>(q) != p.local)
      works.push_back(comm.irecv(scratch + q * seg, seg, p.node_ranks[q], kCollectiveTag));
  for (int s = 0; s < m; ++s)
    if (s != p.local)
      works.push_back(comm.isend(in + off[static_cast<size_t>(s)] * esz, len[static_cast<size_t>(s)] * esz,
                                 p.node_ranks[static_cast<size_t>(s)], kCollectiveTag));
  wait_all(works);
  if (!owner) return;
  const auto me = static_cast<size_t>(p.local);
  std::memcpy(scratch + me * seg, in + off[me] * esz, seg);  // the output may be the input
  auto* dst = static_cast<std::byte*>(out) + off[me] * esz;
  if (L == 1) return void(std::memcpy(dst, scratch, seg));
  reduce_elems(dst, scratch, scratch + seg, len[me], dtype, op);
  for (size_t q = 2; q < L; ++q) reduce_elems(dst, dst, scratch + q * seg, len[me], dtype, op);
}

void gather_slices_from_owners(Communicator& comm, const Placement& p, void* buf, const std::vector<size_t>& off,
                               const std::vector<size_t>& len, DType dtype) {
  const size_t esz = dtype_size(dtype);
  auto* b = static_cast<std::byte*>(buf);
  const auto m = static_cast<int>(off.size());
  std::vector<WorkPtr> works;
  for (int s = 0; s < m; ++s)
    if (s != p.local)
      works.push_back(comm.irecv(b + off[static_cast<size_t>(s)] * esz, len[static_cast<size_t>(s)] * esz,
                                 p.node_ranks[static_cast<size_t>(s)], kCollectiveTag));
  if (p.local < m) {
    const auto me = static_cast<size_t>(p.local);
    for (size_t q = 0; q < p.node_ranks.size(); ++q)
      if (q != me) works.push_back(comm.isend(b + off[me] * esz, len[me] * esz, p.node_ranks[q], kCollectiveTag));
  }
  wait_all(works);
}

}  // namespace braid::comm::algo
