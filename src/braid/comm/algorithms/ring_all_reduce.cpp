// Ring all-reduce: a ring reduce-scatter streaming into a ring all-gather over the
// same segments (ring_stream.h).
#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/algorithms/ring_stream.h"

namespace braid::comm::algo {

void ring_all_reduce(Communicator& comm, Workspace& ws, const RingOptions& opts, const void* send,
                     void* recv, size_t count, DType dtype, ReduceOp op) {
  if (ring::trivial_reduction(comm, send, recv, count, dtype)) return;
  const int n = comm.size();
  const size_t esz = dtype_size(dtype);
  ring::Ring R(comm, dtype, opts.chunk_bytes);
  R.split_uneven(count);
  auto* out = static_cast<std::byte*>(recv);
  ring::Stream S = ring::reducing_stream(R, 2 * (n - 1), op, send);
  S.dst = [&](int, int j) { return out + R.off[j] * esz; };
  // The all-gather receive of step t overwrites the segment sent at step t-(n-1): a
  // partial in `out`, or (step 0) `in`, which is the same memory only when in place.
  const bool in_place = send == recv;
  S.hazard_send_step_on_recv = [n, in_place](int t) {
    const int hs = t - (n - 1);
    return (hs > 0 || in_place) ? hs : -1;
  };
  ring::run_stream(R, &ws, opts, S);
}

const CollectiveAlgorithm kRingAllReduce{"ring_all_reduce", Collective::all_reduce, run_ring_reducing<ring_all_reduce>};

}  // namespace braid::comm::algo
