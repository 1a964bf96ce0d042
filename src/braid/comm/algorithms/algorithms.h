// Collective algorithms written once over Communicator point-to-point calls
// (send / recv / isend / irecv / sendrecv), independent of the transport, one file
// each in this folder. Each call must be made by every rank of `comm` with matching
// arguments. All traffic uses tag kCollectiveTag. Which one runs a given call is
// decided in one place, select_algorithm (selector.h).
//
// Adding an algorithm: its file (the function and its CollectiveAlgorithm entry),
// one `extern` line below, its rule in selector.cpp and its case in
// tests/unit/test_comm_selector.cpp.
//
// Sources: ring reduce-scatter + all-gather all-reduce (Patarasuk & Yuan 2009; gloo
// allreduce_ring_chunked), recursive doubling and halving (Thakur, Rabenseifner & Gropp
// 2005), binomial-tree broadcast and dissemination barrier (Hensgen, Finkel & Manber
// 1988), scatter + all-gather broadcast (van de Geijn et al. 1997), pairwise-exchange
// all-to-all (Thakur et al. 2005).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/algorithms/selector.h"
#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::comm::algo {

/// Tag reserved for collective traffic; user point-to-point tags must be smaller.
/// (MPI guarantees tags up to 32767.)
constexpr int kCollectiveTag = 32000;

/// Grow-only scratch memory owned by a communicator (pre-touched, huge pages advised
/// for large blocks; category comm in `ledger` when one is given). Slot i is an
/// independent buffer; its contents are not preserved when it grows.
class Workspace {
 public:
  explicit Workspace(MemoryLedger* ledger = nullptr) : ledger_(ledger) {}
  void* get(int slot, size_t bytes);

 private:
  MemoryLedger* ledger_;
  Buffer bufs_[4];
};

/// The arguments of any collective, as the communicator received them: `count`
/// per the collective's contract; op for the reductions, root for broadcast (whose
/// buffer is recv).
struct CollectiveArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
};

/// One algorithm as the selector returns it: its name (for tests and traces), the
/// collective it implements and how to run it.
struct CollectiveAlgorithm {
  const char* name;
  Collective op;
  void (*run)(Communicator& comm, Workspace& ws, const RingOptions& opts, const CollectiveArgs& a);
};

// The entries, one per file.
extern const CollectiveAlgorithm kRingAllReduce, kDoublingAllReduce, kHalvingDoublingAllReduce;
extern const CollectiveAlgorithm kRingReduceScatter;
extern const CollectiveAlgorithm kRingAllGather, kDoublingAllGather, kDirectAllGather;
extern const CollectiveAlgorithm kDirectAllToAll, kPairwiseAllToAll;
extern const CollectiveAlgorithm kNoBroadcast, kFlatBroadcast, kBinomialBroadcast, kScatterAllGatherBroadcast,
    kChainBroadcast;
extern const CollectiveAlgorithm kDisseminationBarrier;
extern const CollectiveAlgorithm kHierarchicalAllReduce, kHierarchicalReduceScatter, kHierarchicalAllGather,
    kHierarchicalBroadcast;

/// recv[i] = op over ranks of send[i]; send == recv in place. Ring reduce-scatter then
/// ring all-gather over count split into size() segments (uneven when count % size != 0),
/// each cut into chunks of opts.chunk_bytes which are forwarded as soon as they are
/// reduced, so reduction of one chunk overlaps the transfer of the next. The final
/// value of segment j is computed on rank j only and then copied, so all ranks end
/// bitwise identical. avg: f32 sum, divided by size() once on the final step. One
/// rank or count 0: a copy. Traffic per rank: 2 (n-1)/n * count * elem bytes each way.
void ring_all_reduce(Communicator& comm, Workspace& ws, const RingOptions& opts, const void* send,
                     void* recv, size_t count, DType dtype, ReduceOp op);

/// Recursive doubling, power-of-two sizes only: round k exchanges the whole partial
/// with rank ^ 2^k. Each pair combines in rank order (lower op higher), so both
/// partners compute identical bits and all ranks end bitwise identical.
/// Traffic: log2(n) * count elements each way per rank.
void doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send, void* recv,
                         size_t count, DType dtype, ReduceOp op);

/// Rabenseifner, power-of-two sizes only: reduce-scatter by recursive halving (rank r
/// ends with the final value of segment r, computed there only) then all-gather by
/// recursive doubling. Same traffic as the ring, (n-1)/n * count each way per phase,
/// in log2(n) steps per phase.
void halving_doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send,
                                 void* recv, size_t count, DType dtype, ReduceOp op);

/// send: size()*count elements; recv: count elements = block rank() of the reduction.
/// recv may equal send + rank*count. Other blocks of send are not modified.
void ring_reduce_scatter(Communicator& comm, Workspace& ws, const RingOptions& opts,
                         const void* send, void* recv, size_t count, DType dtype, ReduceOp op);

/// recv (size()*count) = concat of every rank's send (count); send may equal
/// recv + rank*count. Pipelined ring in chunks of opts.chunk_bytes.
void ring_all_gather(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                     size_t count, DType dtype);

/// Recursive doubling all-gather, power-of-two sizes only: round k exchanges the 2^k
/// blocks held so far with rank ^ 2^k. Same contract as ring_all_gather.
void doubling_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype);

/// Direct all-gather: every rank posts all n-1 receives and n-1 sends of its block at
/// once and waits for them (one round, n-1 messages each way).
void direct_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype);

/// An all-to-all's n blocks of `blk` bytes in send (`in`) and recv (`out`), this
/// rank's block copied already. Throws braid::Error when the buffers overlap.
struct AllToAllBlocks {
  AllToAllBlocks(Communicator& comm, const void* send, void* recv, size_t count, DType dtype);
  const std::byte* in_block(int q) const { return in + static_cast<size_t>(q) * blk; }
  std::byte* out_block(int q) const { return out + static_cast<size_t>(q) * blk; }
  /// This rank's own block, copied locally (after the messages are posted, so
  /// the copy overlaps the transfers).
  void copy_own() const;
  int n, r;
  size_t blk;
  const std::byte* in;
  std::byte* out;
};

/// Direct all-to-all: all n-1 receives then all n-1 sends (to r+1, r+2, ...) posted at
/// once, then waited. send/recv must not overlap.
void direct_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype);

/// Pairwise exchange: in step s (1..n-1) rank r sends block (r+s)%n and receives block
/// (r-s)%n. send/recv: size()*count elements, must not overlap.
void pairwise_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype);

/// Broadcasts of `bytes` bytes at `buf` from `root` (every rank passes the same root).
/// This rank's place relative to the root, (rank - root) mod n. Throws braid::Error
/// naming the root when it is outside the group.
int broadcast_rank(Communicator& comm, int root);
/// Flat tree: the root posts a send to every rank at once.
void flat_broadcast(Communicator& comm, void* buf, size_t bytes, int root);
/// Binomial tree: log2(n) rounds, the latency-optimal choice for small messages.
void binomial_broadcast(Communicator& comm, void* buf, size_t bytes, int root);
/// Scatter of the buffer in n-1 pieces to the non-roots, then a direct all-gather
/// among them: the root sends the buffer once, each non-root receives it once.
void scatter_allgather_broadcast(Communicator& comm, void* buf, size_t bytes, int root);
/// Pipelined chain root -> root+1 -> ... in chunks of chunk_bytes, each forwarded as
/// soon as it arrives: bandwidth-optimal for large buffers.
void chain_broadcast(Communicator& comm, void* buf, size_t bytes, size_t chunk_bytes, int root);

/// Dissemination barrier: ceil(log2 n) rounds of 1-byte sendrecv.
void dissemination_barrier(Communicator& comm);

// Adapters from an algorithm's own signature to CollectiveAlgorithm::run.
template <void (*F)(Communicator&, const void*, void*, size_t, DType)>
void run_copying(Communicator& c, Workspace&, const RingOptions&, const CollectiveArgs& a) {
  F(c, a.send, a.recv, a.count, a.dtype);
}
template <void (*F)(Communicator&, Workspace&, const void*, void*, size_t, DType, ReduceOp)>
void run_reducing(Communicator& c, Workspace& ws, const RingOptions&, const CollectiveArgs& a) {
  F(c, ws, a.send, a.recv, a.count, a.dtype, a.op);
}
template <void (*F)(Communicator&, Workspace&, const RingOptions&, const void*, void*, size_t, DType, ReduceOp)>
void run_ring_reducing(Communicator& c, Workspace& ws, const RingOptions& o, const CollectiveArgs& a) {
  F(c, ws, o, a.send, a.recv, a.count, a.dtype, a.op);
}
template <void (*F)(Communicator&, void*, size_t, int)>
void run_broadcast(Communicator& c, Workspace&, const RingOptions&, const CollectiveArgs& a) {
  F(c, a.recv, a.count * dtype_size(a.dtype), a.root);
}

}  // namespace braid::comm::algo
