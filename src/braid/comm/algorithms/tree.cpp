// Broadcast (binomial tree / pipelined chain), pairwise all-to-all and the
// dissemination barrier, all over point-to-point calls.
#include <algorithm>
#include <cstring>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

namespace {
constexpr int tag = kCollectiveTag;

// Flat tree: one round, every receiver pulls the whole buffer from the root.
void flat_broadcast(Communicator& comm, std::byte* p, size_t bytes, int root, int vr) {
  const int n = comm.size();
  if (vr != 0) {
    comm.recv(p, bytes, root, tag);
    return;
  }
  std::vector<WorkPtr> ws;
  ws.reserve(static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) ws.push_back(comm.isend(p, bytes, (root + s) % n, tag));
  for (auto& w : ws) w->wait();
}

// Binomial tree: in round `mask` the ranks vr < mask (which hold the data) send to
// vr + mask; log2(n) rounds, the latency-optimal choice for small messages.
void binomial_broadcast(Communicator& comm, std::byte* p, size_t bytes, int root, int vr) {
  const int n = comm.size();
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr < mask) {
      if (vr + mask < n) comm.send(p, bytes, (vr + mask + root) % n, tag);
    } else if (vr < 2 * mask) {
      comm.recv(p, bytes, (vr - mask + root) % n, tag);
    }
  }
}

// Scatter + all-gather (van de Geijn): the root sends piece k of n-1 to non-root
// vr = k+1, which then sends it to every other non-root (all messages posted at
// once). The root sends the buffer once; each non-root receives it once.
void scatter_allgather_broadcast(Communicator& comm, std::byte* p, size_t bytes, int root, int vr) {
  const int n = comm.size(), m = n - 1;
  auto piece = [&](int k, size_t& o, size_t& l) {  // uneven split of bytes into m pieces
    const size_t base = bytes / m, rem = bytes % m;
    const size_t kk = static_cast<size_t>(k);
    o = kk * base + std::min(kk, rem);
    l = base + (kk < rem ? 1 : 0);
  };
  auto real = [&](int v) { return (v + root) % n; };
  std::vector<WorkPtr> ws;
  ws.reserve(2 * static_cast<size_t>(n));
  size_t o, l;
  if (vr == 0) {
    for (int k = 0; k < m; ++k) {
      piece(k, o, l);
      if (l) ws.push_back(comm.isend(p + o, l, real(k + 1), tag));
    }
  } else {
    const int me = vr - 1;
    piece(me, o, l);
    WorkPtr mine = l ? comm.irecv(p + o, l, root, tag) : nullptr;
    for (int s = 1; s < m; ++s) {
      const int k = (me - s + m) % m;
      piece(k, o, l);
      if (l) ws.push_back(comm.irecv(p + o, l, real(k + 1), tag));
    }
    if (mine) {
      mine->wait();
      piece(me, o, l);
      for (int s = 1; s < m; ++s) ws.push_back(comm.isend(p + o, l, real((me + s) % m + 1), tag));
    }
  }
  for (auto& w : ws) w->wait();
}

// Pipelined chain root -> root+1 -> ... : each chunk is forwarded as soon as it
// arrives, so time ~ (chunks + n - 2) chunk transfers: bandwidth-optimal for large.
void chain_broadcast(Communicator& comm, std::byte* p, size_t bytes, size_t chunk_bytes, int vr) {
  const int n = comm.size(), r = comm.rank();
  const size_t C = std::max<size_t>(chunk_bytes, 1);
  const size_t nch = (bytes + C - 1) / C;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const bool last = vr == n - 1;
  std::vector<WorkPtr> sends, recvs;
  if (vr == 0) {
    for (size_t i = 0; i < nch; ++i) sends.push_back(comm.isend(p + i * C, std::min(C, bytes - i * C), next, tag));
  } else {
    for (size_t i = 0; i < nch; ++i) recvs.push_back(comm.irecv(p + i * C, std::min(C, bytes - i * C), prev, tag));
    for (size_t i = 0; i < nch; ++i) {
      recvs[i]->wait();
      if (!last) sends.push_back(comm.isend(p + i * C, std::min(C, bytes - i * C), next, tag));
    }
  }
  for (auto& w : sends) w->wait();
}
}  // namespace

void broadcast(Communicator& comm, const RingOptions& opts, void* buf, size_t count, DType dtype,
               int root) {
  const int n = comm.size(), r = comm.rank();
  BRAID_CHECK(root >= 0 && root < n, "broadcast root ", root, " outside group of ", n);
  const size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) return;
  const int vr = (r - root + n) % n;  // rank relative to root
  auto* p = static_cast<std::byte*>(buf);
  if (n > 2 && bytes <= opts.flat_broadcast_max_bytes) return flat_broadcast(comm, p, bytes, root, vr);
  // n == 2: nothing to pipeline.
  if (bytes < opts.chain_broadcast_min_bytes || n == 2) return binomial_broadcast(comm, p, bytes, root, vr);
  if (bytes < opts.scatter_broadcast_max_bytes) return scatter_allgather_broadcast(comm, p, bytes, root, vr);
  chain_broadcast(comm, p, bytes, opts.chunk_bytes, vr);
}

void pairwise_all_to_all(Communicator& comm, const void* send, void* recv, size_t count,
                         DType dtype) {
  const AllToAllBlocks b(comm, send, recv, count, dtype);
  b.copy_own();
  for (int s = 1; s < b.n && b.blk > 0; ++s) {
    const int dst = (b.r + s) % b.n, src = (b.r - s + b.n) % b.n;
    comm.sendrecv(b.in_block(dst), b.blk, dst, b.out_block(src), b.blk, src, kCollectiveTag);
  }
}

void dissemination_barrier(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  char s = 0, x = 0;
  for (int k = 1; k < n; k <<= 1)
    comm.sendrecv(&s, 1, (r + k) % n, &x, 1, (r - k + n) % n, kCollectiveTag);
}

}  // namespace braid::comm::algo
