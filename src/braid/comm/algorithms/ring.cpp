// Chunked, pipelined ring reduce-scatter / all-gather / all-reduce.
//
// Step t of the ring (t = 0 .. steps-1): rank r sends segment (r - base - t) to r+1 and
// receives segment (r - base - 1 - t) from r-1. With base = 1 the first n-1 steps are
// reduce-scatter steps (received partial op own input) and rank r ends the last one with
// the final value of segment r; all-gather steps then forward final segments. A chunk
// received in step t is forwarded in step t+1 as soon as it is reduced, so every rank
// streams chunks instead of waiting for whole segments.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/reduce.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

void* Workspace::get(int slot, size_t bytes) {
  BRAID_CHECK(slot >= 0 && slot < 4, "workspace slot ", slot);
  Buffer& b = bufs_[slot];
  if (b.bytes() < bytes || !b.data()) b = Buffer(std::max<size_t>(bytes, 64), MemCategory::comm, ledger_);
  return b.data();
}

namespace {

struct Ring {
  Communicator& c;
  int n, r, next, prev;
  DType dt;
  size_t esz, C;                      // element bytes, chunk elements
  std::vector<size_t> off, len;       // segment j: elements [off, off+len)

  Ring(Communicator& comm, DType dtype, size_t chunk_bytes)
      : c(comm), n(comm.size()), r(comm.rank()), next((r + 1) % n), prev((r + n - 1) % n),
        dt(dtype), esz(dtype_size(dtype)), C(std::max<size_t>(1, chunk_bytes / esz)) {}

  // Uneven split of count into n segments: the first count % n get one more element.
  void split_uneven(size_t count) {
    size_t base = count / n, rem = count % n, o = 0;
    for (int j = 0; j < n; ++j) {
      size_t l = base + (static_cast<size_t>(j) < rem ? 1 : 0);
      off.push_back(o);
      len.push_back(l);
      o += l;
    }
  }
  void split_blocks(size_t count) {
    for (int j = 0; j < n; ++j) {
      off.push_back(static_cast<size_t>(j) * count);
      len.push_back(count);
    }
  }
  int mod(int x) const { return ((x % n) + n) % n; }
  size_t nchunks(int j) const { return (len[j] + C - 1) / C; }
  size_t chunk_len(int j, size_t i) const { return std::min(C, len[j] - i * C); }
};

struct Stream {
  int steps = 0;     // total ring steps
  int rs_steps = 0;  // the first rs_steps reduce; the rest copy
  int base = 1;
  ReduceOp op = ReduceOp::sum;
  float final_divisor = 0.f;                           // applied on the last reduce step
  const std::byte* own = nullptr;                      // own input, indexed by element offset
  std::function<const std::byte*(int j)> step0_src;    // start of segment j for the first send
  std::function<std::byte*(int t, int j)> dst;         // where step t stores segment j
  // Send of (step, chunk) whose source memory a receive/reduce at (t, i) overwrites,
  // or step -1 when there is none. The engine waits for that send first.
  std::function<int(int t)> hazard_send_step_on_recv = [](int) { return -1; };
  std::function<int(int t)> hazard_send_step_on_reduce = [](int) { return -1; };
};

// A stream of `steps` ring steps whose first n-1 reduce (op; avg divides on
// the last of them) the input `in`, segment j starting at element R.off[j].
Stream reducing_stream(const Ring& R, int steps, ReduceOp op, const std::byte* in) {
  const int n = R.c.size();
  Stream S;
  S.steps = steps;
  S.rs_steps = n - 1;
  S.base = 1;
  S.op = op;
  S.final_divisor = op == ReduceOp::avg ? static_cast<float>(n) : 0.f;
  S.own = in;
  const size_t esz = R.esz;
  S.step0_src = [&R, in, esz](int j) { return in + R.off[j] * esz; };
  return S;
}

void run_stream(Ring& R, Workspace* ws, const RingOptions& o, const Stream& S) {
  const int tag = kCollectiveTag;
  const size_t esz = R.esz, C = R.C;
  auto send_seg = [&](int t) { return R.mod(R.r - S.base - t); };
  auto recv_seg = [&](int t) { return R.mod(R.r - S.base - 1 - t); };

  std::vector<std::vector<WorkPtr>> sends(S.steps);
  {
    int j = send_seg(0);
    const std::byte* p = S.step0_src(j);
    for (size_t i = 0; i < R.nchunks(j); ++i)
      sends[0].push_back(R.c.isend(p + i * C * esz, R.chunk_len(j, i) * esz, R.next, tag));
  }
  struct Unit {
    int t;
    size_t i;
  };
  std::vector<Unit> units;
  for (int t = 0; t < S.steps; ++t)
    for (size_t i = 0; i < R.nchunks(recv_seg(t)); ++i) units.push_back({t, i});

  const size_t depth = static_cast<size_t>(std::max(1, o.depth));
  std::byte* tmp = nullptr;
  if (S.rs_steps > 0 && !units.empty())
    tmp = static_cast<std::byte*>(ws->get(0, depth * std::min(C, R.len[0] + 1) * esz));
  const size_t tmp_stride = std::min(C, R.len[0] + 1) * esz;  // segment 0 is the longest

  std::vector<WorkPtr> rq(units.size());
  size_t posted = 0;
  // Posts receives in order while within `depth` of the unit being processed and free
  // of hazards (a receive into memory an earlier send still reads must wait for it).
  auto post_ahead = [&](size_t u) {
    while (posted < units.size() && posted < u + depth) {
      const Unit& x = units[posted];
      int j = recv_seg(x.t);
      size_t l = R.chunk_len(j, x.i);
      std::byte* target;
      if (x.t < S.rs_steps) {
        target = tmp + (posted % depth) * tmp_stride;
      } else {
        int hs = S.hazard_send_step_on_recv(x.t);
        if (hs >= 0) {
          if (sends[hs].size() <= x.i) break;  // that send is not even posted yet
          sends[hs][x.i]->wait();
        }
        target = S.dst(x.t, j) + x.i * C * esz;
      }
      rq[posted] = R.c.irecv(target, l * esz, R.prev, tag);
      ++posted;
    }
  };

  for (size_t u = 0; u < units.size(); ++u) {
    post_ahead(u);
    BRAID_CHECK(posted > u, "ring receive ", u, " could not be posted");
    rq[u]->wait();
    rq[u].reset();
    const Unit& x = units[u];
    int j = recv_seg(x.t);
    size_t l = R.chunk_len(j, x.i);
    std::byte* d = S.dst(x.t, j) + x.i * C * esz;
    if (x.t < S.rs_steps) {
      int hs = S.hazard_send_step_on_reduce(x.t);
      if (hs >= 0 && sends[hs].size() > x.i) sends[hs][x.i]->wait();
      float div = (x.t == S.rs_steps - 1) ? S.final_divisor : 0.f;
      reduce_elems(d, tmp + (u % depth) * tmp_stride, S.own + (R.off[j] + x.i * C) * esz, l, R.dt,
                   S.op, div);
    }
    post_ahead(u + 1);  // the tmp slot of u is free again
    if (x.t + 1 < S.steps) sends[x.t + 1].push_back(R.c.isend(d, l * esz, R.next, tag));
  }
  for (auto& step : sends)
    for (auto& w : step) w->wait();
}

// Nothing to send (count 0), or one rank (the result is the input): handled here.
bool trivial_reduction(Communicator& comm, const void* send, void* recv, size_t count, DType dtype) {
  if (count > 0 && comm.size() > 1) return false;
  if (count > 0 && send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
  return true;
}

}  // namespace

void ring_all_reduce(Communicator& comm, Workspace& ws, const RingOptions& opts, const void* send,
                     void* recv, size_t count, DType dtype, ReduceOp op) {
  if (trivial_reduction(comm, send, recv, count, dtype)) return;
  const int n = comm.size();
  const size_t esz = dtype_size(dtype);
  const size_t doubling_max =
      n == 2 ? opts.doubling_all_reduce_max_bytes_2ranks : opts.doubling_all_reduce_max_bytes;
  if ((n & (n - 1)) == 0 && count * esz <= doubling_max)
    return doubling_all_reduce(comm, ws, send, recv, count, dtype, op);
  if ((n & (n - 1)) == 0 && n > 2 && count * esz <= opts.halving_all_reduce_max_bytes &&
      count >= static_cast<size_t>(n))
    return halving_doubling_all_reduce(comm, ws, send, recv, count, dtype, op);
  Ring R(comm, dtype, opts.chunk_bytes);
  R.split_uneven(count);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  Stream S = reducing_stream(R, 2 * (n - 1), op, in);
  S.dst = [&](int, int j) { return out + R.off[j] * esz; };
  // The all-gather receive of step t overwrites the segment sent at step t-(n-1): a
  // partial in `out`, or (step 0) `in`, which is the same memory only when in place.
  const bool in_place = send == recv;
  S.hazard_send_step_on_recv = [n, in_place](int t) {
    const int hs = t - (n - 1);
    return (hs > 0 || in_place) ? hs : -1;
  };
  run_stream(R, &ws, opts, S);
}

void doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send, void* recv,
                         size_t count, DType dtype, ReduceOp op) {
  const int n = comm.size(), r = comm.rank();
  BRAID_CHECK((n & (n - 1)) == 0, "recursive doubling needs a power-of-two group, got ", n);
  const size_t bytes = count * dtype_size(dtype);
  if (count == 0) return;
  if (n == 1) {
    if (send != recv) std::memcpy(recv, send, bytes);
    return;
  }
  auto* tmp = static_cast<std::byte*>(ws.get(0, bytes));
  const void* cur = send;  // first round reads the input, later ones the partial in recv
  for (int mask = 1; mask < n; mask <<= 1) {
    const int partner = r ^ mask;
    comm.sendrecv(cur, bytes, partner, tmp, bytes, partner, kCollectiveTag);
    const bool last = mask * 2 >= n;
    const float div = (last && op == ReduceOp::avg) ? static_cast<float>(n) : 0.f;
    // lower rank's partial op higher rank's: the same bits on both partners.
    if (r < partner)
      reduce_elems(recv, cur, tmp, count, dtype, op, div);
    else
      reduce_elems(recv, tmp, cur, count, dtype, op, div);
    cur = recv;
  }
}

void halving_doubling_all_reduce(Communicator& comm, Workspace& ws, const void* send,
                                 void* recv, size_t count, DType dtype, ReduceOp op) {
  const int n = comm.size(), r = comm.rank();
  BRAID_CHECK((n & (n - 1)) == 0, "recursive halving needs a power-of-two group, got ", n);
  const size_t esz = dtype_size(dtype);
  if (count == 0) return;
  if (n == 1) {
    if (send != recv) std::memcpy(recv, send, count * esz);
    return;
  }
  Ring R(comm, dtype, 1);
  R.split_uneven(count);
  auto off = [&](int j) { return j == n ? count : R.off[j]; };  // element offset of block j
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  auto* tmp = static_cast<std::byte*>(ws.get(0, (count / 2 + n) * esz));
  // Reduce-scatter: keep the half of the current block range that contains block r.
  const std::byte* cur = in;  // first round reads the input, later ones the partial in out
  int lo = 0, hi = n;
  for (int mask = n / 2; mask >= 1; mask /= 2) {
    const int partner = r ^ mask, mid = lo + (hi - lo) / 2;
    const bool keep_low = (r & mask) == 0;
    const int klo = keep_low ? lo : mid, khi = keep_low ? mid : hi;
    const int slo = keep_low ? mid : lo, shi = keep_low ? hi : mid;
    const size_t kn = off(khi) - off(klo), sn = off(shi) - off(slo);
    comm.sendrecv(cur + off(slo) * esz, sn * esz, partner, tmp, kn * esz, partner, kCollectiveTag);
    const float div = (mask == 1 && op == ReduceOp::avg) ? static_cast<float>(n) : 0.f;
    std::byte* d = out + off(klo) * esz;
    const std::byte* mine = cur + off(klo) * esz;
    // lower rank's partial op higher rank's, whichever rank computes it.
    if (r < partner)
      reduce_elems(d, mine, tmp, kn, dtype, op, div);
    else
      reduce_elems(d, tmp, mine, kn, dtype, op, div);
    cur = out;
    lo = klo;
    hi = khi;
  }
  // All-gather: exchange the owned block range with the neighbour range, doubling it.
  for (int mask = 1; mask < n; mask *= 2) {
    const int partner = r ^ mask;
    const int plo = lo ^ mask, phi = plo + (hi - lo);  // partner's range (aligned groups)
    comm.sendrecv(out + off(lo) * esz, (off(hi) - off(lo)) * esz, partner, out + off(plo) * esz,
                  (off(phi) - off(plo)) * esz, partner, kCollectiveTag);
    lo = std::min(lo, plo);
    hi = lo + 2 * (phi - plo);
  }
}

void ring_reduce_scatter(Communicator& comm, Workspace& ws, const RingOptions& opts,
                         const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  if (trivial_reduction(comm, send, recv, count, dtype)) return;
  const int n = comm.size();
  const size_t esz = dtype_size(dtype);
  Ring R(comm, dtype, opts.chunk_bytes);
  R.split_blocks(count);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // Partials of steps < n-2 alternate between two scratch blocks; the last step
  // writes the final block straight into recv.
  std::byte* scratch =
      n > 2 ? static_cast<std::byte*>(ws.get(1, 2 * count * esz)) : nullptr;
  Stream S = reducing_stream(R, n - 1, op, in);
  S.dst = [&, n](int t, int) -> std::byte* {
    if (t == n - 2) return out;
    return scratch + static_cast<size_t>(t % 2) * count * esz;
  };
  // Scratch block t%2 was last written at step t-2 and read by the send of step t-1.
  S.hazard_send_step_on_reduce = [](int t) { return t >= 2 ? t - 1 : -1; };
  run_stream(R, &ws, opts, S);
}

void ring_all_gather(Communicator& comm, const RingOptions& opts, const void* send, void* recv,
                     size_t count, DType dtype) {
  const int n = comm.size(), r = comm.rank();
  const size_t esz = dtype_size(dtype);
  if (count == 0) return;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(r) * count * esz;
  if (in != mine) std::memcpy(mine, in, count * esz);
  if (n == 1) return;
  // With two ranks nothing is forwarded, so chunking would only add messages.
  Ring R(comm, dtype, n == 2 ? count * esz : opts.chunk_bytes);
  R.split_blocks(count);
  Stream S;
  S.steps = n - 1;
  S.rs_steps = 0;
  S.base = 0;
  S.step0_src = [&](int) { return in; };
  S.dst = [&](int, int j) { return out + R.off[j] * esz; };
  run_stream(R, nullptr, opts, S);
}

}  // namespace braid::comm::algo
