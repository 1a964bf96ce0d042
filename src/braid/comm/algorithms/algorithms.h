// Collective algorithms written once over Communicator point-to-point calls
// (send / recv / isend / irecv / sendrecv), independent of the transport.
// Each call must be made by every rank of `comm` with matching arguments.
// All traffic uses tag kCollectiveTag.
//
// Sources: ring reduce-scatter + all-gather all-reduce (Patarasuk & Yuan 2009; gloo
// allreduce_ring_chunked), binomial-tree broadcast and dissemination barrier
// (Hensgen, Finkel & Manber 1988), pairwise-exchange all-to-all (Thakur et al. 2005).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::comm::algo {

/// Tag reserved for collective traffic; user point-to-point tags must be smaller.
/// (MPI guarantees tags up to 32767.)
constexpr int kCollectiveTag = 32000;

struct RingOptions {
  size_t chunk_bytes = size_t{1} << 20;  // pipelining unit of the rings, bytes
  int depth = 4;                         // receives posted ahead of the one being reduced
  size_t chain_broadcast_min_bytes = size_t{256} << 10;  // pipelined chain above this
  // All-reduce of at most this many bytes on a power-of-two group uses recursive
  // doubling (log2 n rounds instead of 2(n-1): fewer round trips where latency
  // dominates). Thresholds measured on the 2-core dev machines (OpenMPI 4.1, vader/CMA):
  // with 2 ranks a single whole-buffer exchange beats the ring's two phases up to
  // 8 MiB on a host whose memcpy runs at ~19 GB/s (0.80-0.82 of memcpy at 2-4 MiB
  // against the ring's 0.45; 0.67 against 0.45 at 8 MiB; the ring wins from 16 MiB),
  // while an earlier host at ~5.5 GB/s had it 20-30 % behind the ring at 2-4 MiB
  // (docs/BENCHMARKS.md, "Messages on private buffers"); with 4 ranks doubling wins up to ~64 KiB,
  // Rabenseifner to ~1 MiB, the ring above. Environment overrides:
  // BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES[_2RANKS] (apply_env).
  size_t doubling_all_reduce_max_bytes = size_t{128} << 10;
  size_t doubling_all_reduce_max_bytes_2ranks = size_t{8} << 20;
  // Above that and up to this, power-of-two groups of more than 2 ranks use
  // Rabenseifner's algorithm (2 log2 n steps instead of the ring's 2(n-1)).
  size_t halving_all_reduce_max_bytes = size_t{1} << 20;
  // All-gather with more than 2 ranks (output bytes = size() * count * elem): power-of-two
  // groups use recursive doubling up to doubling_all_gather_max_bytes (log2 n exchanges of
  // whole block ranges); otherwise direct (every block posted to every peer at once) up to
  // direct_all_gather_max_bytes; the pipelined ring above. With 2 ranks all are one
  // exchange: direct, with the local copy overlapping it.
  size_t doubling_all_gather_max_bytes = size_t{32} << 20;
  size_t direct_all_gather_max_bytes = size_t{32} << 20;
  // All-to-all: post every receive and send at once (one round) instead of n-1 pairwise
  // sendrecv rounds.
  bool direct_all_to_all = true;
  // Broadcast with more than 2 ranks of at least chain_broadcast_min_bytes and below
  // this: scatter + all-gather (van de Geijn); the pipelined chain from here on.
  size_t scatter_broadcast_max_bytes = size_t{32} << 20;
  // Broadcast with more than 2 ranks up to this: flat tree (the root posts a send to
  // every rank at once). Single-copy shared-memory transports (CMA/XPMEM) let each
  // receiver copy in parallel, so this beats the binomial tree at mid sizes.
  size_t flat_broadcast_max_bytes = size_t{4} << 20;  // inclusive
};

/// Overrides `opts` from the environment as read by `getenv` (std::getenv in a
/// communicator; a map in tests). Each variable names the member it sets:
/// BRAID_COMM_RING_CHUNK_BYTES, BRAID_COMM_RING_RECVS_AHEAD (1..64),
/// BRAID_COMM_{ALLREDUCE,ALLGATHER,BROADCAST}_*_MAX_BYTES, BRAID_COMM_ALLTOALL_ONE_ROUND
/// (0/1); env_names() lists them all. Byte values are plain digits.
/// Throws ConfigError naming the variable, its value and the fix when a value does
/// not parse, or when a variable is set under the name it had before (so that a
/// setting is never silently ignored).
void apply_env(RingOptions& opts, const std::function<const char*(const char*)>& getenv);
/// Throws ConfigError naming the variable and the known ones when a name in `set`
/// (the environment's variable names) starts with BRAID_COMM_ but is not one of them.
void check_env_names(const std::vector<std::string>& set);
/// Every variable apply_env reads, in docs/CONFIGURATION.md's order.
std::vector<std::string> env_names();

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

/// recv[i] = op over ranks of send[i]; send == recv in place. Dispatches to
/// doubling_all_reduce for small messages on power-of-two groups (see RingOptions),
/// otherwise ring reduce-scatter then
/// ring all-gather over count split into size() segments (uneven when count % size != 0),
/// each cut into chunks of opts.chunk_bytes which are forwarded as soon as they are
/// reduced, so reduction of one chunk overlaps the transfer of the next. The final
/// value of segment j is computed on rank j only and then copied, so all ranks end
/// bitwise identical. avg: f32 sum, divided by size() once on the final step.
/// Traffic per rank: 2 (n-1)/n * count * elem bytes sent and received.
void ring_all_reduce(Communicator& comm, Workspace& ws, const RingOptions& opts, const void* send,
                     void* recv, size_t count, DType dtype, ReduceOp op);

/// Recursive doubling (Thakur, Rabenseifner & Gropp 2005), power-of-two sizes only:
/// round k exchanges the whole partial with rank ^ 2^k. Each pair combines in rank
/// order (lower op higher), so both partners compute identical bits and all ranks end
/// bitwise identical. Traffic: log2(n) * count elements each way per rank.
void doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send, void* recv,
                         size_t count, DType dtype, ReduceOp op);

/// Rabenseifner (Thakur, Rabenseifner & Gropp 2005), power-of-two sizes only:
/// reduce-scatter by recursive halving (rank r ends with the final value of segment r,
/// computed there only) then all-gather by recursive doubling. Same traffic as the
/// ring, (n-1)/n * count each way per phase, in log2(n) steps per phase.
void halving_doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send,
                                 void* recv, size_t count, DType dtype, ReduceOp op);

/// send: size()*count elements; recv: count elements = block rank() of the reduction.
/// recv may equal send + rank*count. Other blocks of send are not modified.
void ring_reduce_scatter(Communicator& comm, Workspace& ws, const RingOptions& opts,
                         const void* send, void* recv, size_t count, DType dtype, ReduceOp op);

/// recv (size()*count) = concat of every rank's send (count); send may equal
/// recv + rank*count.
void ring_all_gather(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                     size_t count, DType dtype);

/// Dispatcher used by the communicators: recursive doubling, direct or ring all-gather
/// (see RingOptions). Same contract as ring_all_gather.
void all_gather(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                size_t count, DType dtype);

/// Recursive doubling all-gather (Thakur, Rabenseifner & Gropp 2005), power-of-two
/// sizes only: round k exchanges the 2^k blocks held so far with rank ^ 2^k.
void doubling_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype);

/// Direct all-gather: every rank posts all n-1 receives and n-1 sends of its block at
/// once and waits for them (one round, n-1 messages each way).
void direct_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype);

/// Dispatcher used by the communicators: direct or pairwise (see RingOptions).
void all_to_all(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                size_t count, DType dtype);

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

/// More than 2 ranks and at most opts.flat_broadcast_max_bytes: flat tree (root sends to all
/// at once). Otherwise binomial tree below opts.chain_broadcast_min_bytes (or with 2 ranks); scatter of the
/// buffer in n-1 pieces to the non-roots then a direct all-gather among them below
/// opts.scatter_broadcast_max_bytes; pipelined chain (chunks of opts.chunk_bytes
/// forwarded root -> root+1 -> ...) above.
void broadcast(Communicator& comm, const RingOptions& opts, void* buf, size_t count, DType dtype,
               int root);

/// Dissemination barrier: ceil(log2 n) rounds of 1-byte sendrecv.
void dissemination_barrier(Communicator& comm);

}  // namespace braid::comm::algo
