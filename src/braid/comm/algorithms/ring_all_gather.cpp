// Ring all-gather: n-1 forwarding steps of the pipelined ring.
#include <cstring>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/algorithms/ring_stream.h"

namespace braid::comm::algo {

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
  ring::Ring R(comm, dtype, n == 2 ? count * esz : opts.chunk_bytes);
  R.split_blocks(count);
  ring::Stream S;
  S.steps = n - 1;
  S.rs_steps = 0;
  S.base = 0;
  S.step0_src = [&](int) { return in; };
  S.dst = [&](int, int j) { return out + R.off[j] * esz; };
  ring::run_stream(R, nullptr, opts, S);
}

const CollectiveAlgorithm kRingAllGather{
    "ring_all_gather", Collective::all_gather,
    [](Communicator& c, Workspace&, const RingOptions& o, const CollectiveArgs& a) {
      ring_all_gather(c, o, a.send, a.recv, a.count, a.dtype);
    }};

}  // namespace braid::comm::algo
