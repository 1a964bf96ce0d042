// Ring reduce-scatter: the first n-1 steps of the ring all-reduce, blocks of equal size.
#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/algorithms/ring_stream.h"

namespace braid::comm::algo {

void ring_reduce_scatter(Communicator& comm, Workspace& ws, const RingOptions& opts,
                         const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  if (ring::trivial_reduction(comm, send, recv, count, dtype)) return;
  const int n = comm.size();
  ring::Ring R(comm, dtype, opts.chunk_bytes);
  R.split_blocks(count);
  auto* out = static_cast<std::byte*>(recv);
  // Partials of steps < n-2 alternate between two scratch blocks; the last step
  // writes the final block straight into recv.
  std::byte* scratch =
      n > 2 ? static_cast<std::byte*>(ws.get(1, 2 * count * R.esz)) : nullptr;
  ring::Stream S = ring::reducing_stream(R, n - 1, op, send);
  S.dst = [&, n](int t, int) -> std::byte* {
    if (t == n - 2) return out;
    return scratch + static_cast<size_t>(t % 2) * count * R.esz;
  };
  // Scratch block t%2 was last written at step t-2 and read by the send of step t-1.
  S.hazard_send_step_on_reduce = [](int t) { return t >= 2 ? t - 1 : -1; };
  ring::run_stream(R, &ws, opts, S);
}

const CollectiveAlgorithm kRingReduceScatter{"ring_reduce_scatter", Collective::reduce_scatter, run_ring_reducing<ring_reduce_scatter>};

}  // namespace braid::comm::algo
