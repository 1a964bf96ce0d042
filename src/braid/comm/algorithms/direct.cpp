// Latency-lean all-gather and all-to-all: recursive doubling (log2 n exchanges) and
// "direct" variants that post every message of the collective at once. Fewer rounds
// of synchronisation than the ring / pairwise schedules, which matters when ranks
// share cores (oversubscription) or the transport has a high per-message cost.
// All of them only copy bytes, so every rank ends with identical bits.
#include <cstring>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

namespace {
bool pow2(int n) { return (n & (n - 1)) == 0; }
void wait_all(std::vector<WorkPtr>& ws) {
  for (auto& w : ws) w->wait();
}
}  // namespace

void all_gather(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                size_t count, DType dtype) {
  const int n = comm.size();
  const size_t total = static_cast<size_t>(n) * count * dtype_size(dtype);
  // Two ranks exchange one block each way: nothing to forward or pipeline.
  if (n == 2) return direct_all_gather(comm, send, recv, count, dtype);
  if (n > 2 && count > 0) {
    if (pow2(n) && total <= opts.doubling_all_gather_max_bytes)
      return doubling_all_gather(comm, send, recv, count, dtype);
    if (total <= opts.direct_all_gather_max_bytes)
      return direct_all_gather(comm, send, recv, count, dtype);
  }
  ring_all_gather(comm, opts, send, recv, count, dtype);
}

void doubling_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype) {
  const int n = comm.size(), r = comm.rank();
  BRAID_CHECK(pow2(n), "recursive doubling needs a power-of-two group, got ", n);
  const size_t blk = count * dtype_size(dtype);
  if (blk == 0) return;
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(r) * blk;
  if (static_cast<const std::byte*>(send) != mine) std::memcpy(mine, send, blk);
  // After round `mask`, rank r holds the aligned range of 2*mask blocks containing r.
  for (int mask = 1; mask < n; mask <<= 1) {
    const int partner = r ^ mask;
    const size_t lo = static_cast<size_t>(r & ~(mask - 1)), plo = static_cast<size_t>(partner & ~(mask - 1));
    comm.sendrecv(out + lo * blk, mask * blk, partner, out + plo * blk, mask * blk, partner,
                  kCollectiveTag);
  }
}

void direct_all_gather(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype) {
  const int n = comm.size(), r = comm.rank();
  const size_t blk = count * dtype_size(dtype);
  if (blk == 0) return;
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(r) * blk;
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) {
    const int src = (r - s + n) % n;
    ws.push_back(comm.irecv(out + static_cast<size_t>(src) * blk, blk, src, kCollectiveTag));
  }
  for (int s = 1; s < n; ++s) ws.push_back(comm.isend(send, blk, (r + s) % n, kCollectiveTag));
  // The local copy overlaps the transfers (the sends read `send`, not `mine`).
  if (static_cast<const std::byte*>(send) != mine) std::memcpy(mine, send, blk);
  wait_all(ws);
}

void all_to_all(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                size_t count, DType dtype) {
  // Two ranks: one exchange either way; direct overlaps it with the local copy.
  if ((opts.direct_all_to_all && comm.size() > 2) || comm.size() == 2)
    return direct_all_to_all(comm, send, recv, count, dtype);
  pairwise_all_to_all(comm, send, recv, count, dtype);
}

AllToAllBlocks::AllToAllBlocks(Communicator& comm, const void* send, void* recv, size_t count, DType dtype)
    : n(comm.size()), r(comm.rank()), blk(count * dtype_size(dtype)), in(static_cast<const std::byte*>(send)),
      out(static_cast<std::byte*>(recv)) {
  BRAID_CHECK(blk == 0 || in + n * blk <= out || out + n * blk <= in, "all_to_all buffers overlap");
}

void AllToAllBlocks::copy_own() const {
  if (blk > 0) std::memcpy(out_block(r), in_block(r), blk);
}

void direct_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                       DType dtype) {
  const AllToAllBlocks b(comm, send, recv, count, dtype);
  if (b.blk == 0) return;
  if (b.n == 1) return b.copy_own();
  const int n = b.n, r = b.r;
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) {
    const int src = (r - s + n) % n;
    ws.push_back(comm.irecv(b.out_block(src), b.blk, src, kCollectiveTag));
  }
  for (int s = 1; s < n; ++s) {
    const int dst = (r + s) % n;
    ws.push_back(comm.isend(b.in_block(dst), b.blk, dst, kCollectiveTag));
  }
  b.copy_own();
  wait_all(ws);
}

}  // namespace braid::comm::algo
