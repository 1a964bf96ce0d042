// Zero-copy collectives over SharedBuffer memory (communicator.h): every rank's block
// of the buffer is mapped in every process of the group, so a rank reads its peers'
// data where it lies instead of receiving a copy.
//
// Each rank's block starts with control lines that only that rank writes (arrive,
// leave, and what the call is), each on its own cache line; the data follows,
// page-aligned. A call k on a buffer (k counts the zero-copy calls on it, the same on
// every rank since collectives are called in the same order) runs:
//   1. publish the call's arguments, then arrive = k; wait until every rank arrived
//      and check that all called the same thing at the same offset;
//   2. the collective's reads and writes, arranged so that during the call each byte
//      is written by one rank and never read by another: all-reduce and all-gather
//      push each result to every rank (a rank writes where only it writes, from data
//      in its own cache), reduce-scatter, all-to-all and broadcast pull inputs no
//      rank writes;
//   3. leave = k; wait until every rank left, so no rank changes its block while a
//      peer may still read or write it.
// Pushing rather than pulling results matters: reading data a peer has just written
// costs a cache-to-cache transfer, which on some hosts runs at a third of memory speed
// (docs/BENCHMARKS.md, "Collectives").
// Waits spin, yield the core every few polls (ranks may outnumber cores) and poll
// poll_signals() and the group's health, so a deadline or a failed peer ends them
// (watchdog.h).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::comm {

/// One cache line holding one counter.
struct alignas(64) SyncLine {
  std::atomic<uint64_t> v{0};
};

/// The control lines at the head of a rank's block, written by that rank only.
struct SharedControl {
  SyncLine arrive;    // k: entered call k; its arguments and input are in place
  SyncLine leave;     // k: no longer reads or writes its peers' blocks for call k
  SyncLine args[4];   // call k's collective, dtype, op and input buffer; byte offset; count; input's offset
};

/// Blocks are page-aligned; a mapping asks for a page more and aligns up.
constexpr size_t kSharedPage = 4096;
inline std::byte* page_aligned(void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<std::byte*>((a + kSharedPage - 1) / kSharedPage * kSharedPage);
}

/// Bytes before the data in every rank's block (the control lines, then padding to a page).
constexpr size_t kSharedHeaderBytes = kSharedPage;
static_assert(sizeof(SharedControl) <= kSharedHeaderBytes);

/// Where each rank's block of one shared buffer is mapped in this process. The
/// backend that made it frees the memory in its destructor.
class SharedMapping {
 public:
  virtual ~SharedMapping() = default;
  std::vector<std::byte*> block;  // rank q's block: kSharedHeaderBytes of control, then data
};

/// The memory behind a SharedBuffer: a mapping every rank can read (zero-copy) or,
/// when the group cannot share memory, private memory.
class SharedAllocation {
 public:
  SharedAllocation(int rank, int size, size_t bytes) : rank(rank), size(size), bytes(bytes) {}
  ~SharedAllocation() {
    if (on_free) on_free(this);
  }
  bool zero_copy() const { return map != nullptr; }
  /// Rank q's data as mapped here (zero-copy only).
  std::byte* data(int q) const { return map->block[static_cast<size_t>(q)] + kSharedHeaderBytes; }
  SharedControl& control(int q) const {
    return *reinterpret_cast<SharedControl*>(map->block[static_cast<size_t>(q)]);
  }
  void* mine() const { return zero_copy() ? static_cast<void*>(data(rank)) : priv.data(); }

  const int rank, size;
  const size_t bytes;
  std::unique_ptr<SharedMapping> map;               // null: private memory
  mutable Buffer priv;                              // the memory when map is null
  std::function<void(SharedAllocation*)> on_free;   // forgets it in its communicator
  std::function<void()> check_peers;                // throws when the group is going down
  uint64_t calls = 0;                               // zero-copy calls made on it
  uint64_t id = 0;                                  // its place among its communicator's buffers
};

namespace zero_copy {

/// The all-reduce reduces its segment in chunks of this many bytes and pushes each
/// to every rank while it is still in cache.
constexpr size_t kChunkBytes = size_t{256} << 10;

/// Every rank's `in` data at byte offset in_off (count elements) reduced into every
/// rank's `out` data at out_off; in place when they are the same bytes, otherwise they
/// must not overlap (`in` may be another shared buffer, or the same one). Segment j
/// (count split into size() near-equal parts) is reduced by rank j, which reads every
/// rank's input segment where it lies (f32 arithmetic, one rounding per pair in 16-bit
/// types, avg divides the sum once) and writes the result into every rank's output.
/// All ranks end bitwise identical.
/// Throws braid::Error naming both calls when a rank passed other arguments.
void all_reduce(SharedAllocation& out, size_t out_off, const SharedAllocation& in, size_t in_off,
                size_t count, DType dtype, ReduceOp op);

/// Every rank's `out` data at out_off gets size() blocks of count elements, block q
/// from rank q, which writes its `own` block (count elements, anywhere; it may be its
/// block of `out`) into every rank's output.
void all_gather(SharedAllocation& out, size_t out_off, const void* own, size_t count, DType dtype);

/// Every rank's data at `off` holds size() blocks of count elements (the input);
/// recv (count elements, private, or this rank's block rank() of the input) gets the
/// reduction of block rank() over ranks.
void reduce_scatter(SharedAllocation& a, size_t off, void* recv, size_t count, DType dtype,
                    ReduceOp op);

/// Every rank's data at `off` holds size() blocks of count elements (the input);
/// block q of recv (private, not overlapping the input) gets block rank() of rank q's.
void all_to_all(SharedAllocation& a, size_t off, void* recv, size_t count, DType dtype);

/// The same with the output shared instead (every rank's `out` data at out_off gets
/// size() blocks): rank r writes block q of its `send` (anywhere, not overlapping
/// the output) into block r of rank q's output.
void all_to_all(SharedAllocation& out, size_t out_off, const void* send, size_t count, DType dtype);

/// Every rank's data at `off` (count elements) gets root's.
void broadcast(SharedAllocation& a, size_t off, size_t count, DType dtype, int root);

}  // namespace zero_copy
}  // namespace braid::comm
