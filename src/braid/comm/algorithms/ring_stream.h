// The pipelined ring engine shared by the ring all-reduce, reduce-scatter and
// all-gather (and the segment split of halving-doubling).
//
// Step t of the ring (t = 0 .. steps-1): rank r sends segment (r - base - t) to r+1 and
// receives segment (r - base - 1 - t) from r-1. With base = 1 the first n-1 steps are
// reduce-scatter steps (received partial op own input) and rank r ends the last one with
// the final value of segment r; all-gather steps then forward final segments. A chunk
// received in step t is forwarded in step t+1 as soon as it is reduced, so every rank
// streams chunks instead of waiting for whole segments.
#pragma once
#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo::ring {

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

/// A stream of `steps` ring steps whose first n-1 reduce (op; avg divides on
/// the last of them) the input `send`, segment j starting at element R.off[j].
Stream reducing_stream(const Ring& R, int steps, ReduceOp op, const void* send);

/// Runs the stream's steps over R (ws: scratch for the reduce steps; null without them).
void run_stream(Ring& R, Workspace* ws, const RingOptions& o, const Stream& S);

/// Nothing to send (count 0), or one rank (the result is the input, copied): true,
/// handled. Otherwise false.
bool trivial_reduction(Communicator& comm, const void* send, void* recv, size_t count, DType dtype);

}  // namespace braid::comm::algo::ring
