// The pieces the hierarchical collectives share: a view of some ranks of a group as a
// group of their own (so the flat algorithms run over a node or over a "rail"), and
// the intra-node phases.
//
// A group that spans k nodes, node j holding L_j of its ranks (local ranks 0..L_j-1
// in group-rank order), runs its collectives in three phases, as NCCL and Horovod's
// hierarchical all-reduce do:
//   1. inside each node: combine the node's inputs so that local rank i holds the
//      node's partial of slice i;
//   2. across nodes: local rank i of every node (rail i) runs the flat collective on
//      slice i, so every rank of a node carries its own slice over the link and the
//      bytes that cross are the minimum (2(k-1)/k of the buffer per node for
//      all-reduce);
//   3. inside each node: every rank gets every slice.
// Uneven nodes (2 + 1): all-reduce cuts the buffer into m = min_j L_j slices, owned by
// local ranks 0..m-1 of every node; the other ranks only send their inputs in phase 1
// and receive the result in phase 3. Reduce-scatter and all-gather need even nodes
// (the selector gives uneven ones the flat algorithms); broadcast works on any map.
// Every phase runs over the group's own point-to-point calls (tag kCollectiveTag):
// the watchdog and flight record see one collective, and the local backend runs the
// same code as MPI, so a node map gives bitwise the same results on both.
#pragma once
#include <memory>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

/// The ranks `members` (group ranks of `parent`, in the order that numbers them) seen
/// as a group: p2p calls map ranks and go to the parent; collectives are not offered
/// (the flat algorithms run over a view, not through it). Valid while parent lives.
class GroupView final : public Communicator {
 public:
  GroupView(Communicator& parent, std::vector<int> members);
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return parent_.backend(); }
  const NodeMap& node_map() const override { return map_; }

  void send(const void* buf, size_t bytes, int peer, int tag) override;
  void recv(void* buf, size_t bytes, int peer, int tag) override;
  WorkPtr isend(const void* buf, size_t bytes, int peer, int tag) override;
  WorkPtr irecv(void* buf, size_t bytes, int peer, int tag) override;
  void sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src,
                int tag) override;

  std::unique_ptr<Communicator> split(int, int) override { unsupported("split"); }
  SharedBuffer alloc_shared(size_t) override { unsupported("alloc_shared"); }
  void all_reduce(const void*, void*, size_t, DType, ReduceOp, Algorithm) override { unsupported("all_reduce"); }
  void all_gather(const void*, void*, size_t, DType, Algorithm) override { unsupported("all_gather"); }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp, Algorithm) override {
    unsupported("reduce_scatter");
  }
  void all_to_all(const void*, void*, size_t, DType, Algorithm) override { unsupported("all_to_all"); }
  void broadcast(void*, size_t, DType, int, Algorithm) override { unsupported("broadcast"); }
  void barrier() override { unsupported("barrier"); }
  WorkPtr all_reduce_async(const void*, void*, size_t, DType, ReduceOp, Algorithm) override {
    unsupported("all_reduce_async");
  }
  WorkPtr all_gather_async(const void*, void*, size_t, DType, Algorithm) override {
    unsupported("all_gather_async");
  }
  WorkPtr reduce_scatter_async(const void*, void*, size_t, DType, ReduceOp, Algorithm) override {
    unsupported("reduce_scatter_async");
  }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
  void set_name(std::string) override {}
  std::string name() const override { return parent_.name(); }
  void set_span_sink(std::shared_ptr<SpanSink>) override {}
  void set_next_label(std::string) override {}

 private:
  [[noreturn]] static void unsupported(const char* what);
  int peer(int view_rank) const { return members_[static_cast<size_t>(view_rank)]; }
  Communicator& parent_;
  std::vector<int> members_;
  int rank_ = -1;
  NodeMap map_;
};

/// Where this rank sits in its group's node map: its node, the node's ranks, its
/// local rank, and its rail (local rank i of every node, in node order; empty when
/// this rank has none, an uneven node's extra rank).
struct Placement {
  Placement(const Communicator& comm, int slices);
  int node, local;
  std::vector<int> node_ranks, rail;
};

/// Runs the flat algorithm the selector picks for `op` over `view` (one node).
void run_flat(Collective op, GroupView& view, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a);

/// Phase 1 of the all-reduce: slice s (elements off[s], len[s]) of every node rank's
/// `send` is reduced, in local-rank order, into `out` + off[s] on the node's rank s
/// (s < off.size(); extra ranks own none). op must not be avg (the caller divides).
void reduce_slices_to_owners(Communicator& comm, Workspace& ws, const Placement& p, const void* send, void* out,
                             const std::vector<size_t>& off, const std::vector<size_t>& len, DType dtype,
                             ReduceOp op);
/// Phase 3 of the all-reduce: the node's rank s sends slice s of `buf` to the others
/// of its node, which receive it in place.
void gather_slices_from_owners(Communicator& comm, const Placement& p, void* buf, const std::vector<size_t>& off,
                               const std::vector<size_t>& len, DType dtype);

/// Near-equal split of count into m slices (the first count % m one longer).
void split_slices(size_t count, int m, std::vector<size_t>& off, std::vector<size_t>& len);

}  // namespace braid::comm::algo
