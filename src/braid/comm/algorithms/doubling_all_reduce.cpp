// Recursive-doubling all-reduce (latency-lean: log2 n rounds of whole-buffer exchanges).
#include <cstring>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/reduce.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

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

const CollectiveAlgorithm kDoublingAllReduce{"doubling_all_reduce", Collective::all_reduce, run_reducing<doubling_all_reduce>};

}  // namespace braid::comm::algo
