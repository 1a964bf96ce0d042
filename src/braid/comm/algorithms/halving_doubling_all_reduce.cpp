// Rabenseifner's all-reduce: reduce-scatter by recursive halving, all-gather by
// recursive doubling.
#include <algorithm>
#include <cstring>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/comm/algorithms/ring_stream.h"
#include "braid/comm/reduce.h"
#include "braid/core/error.h"

namespace braid::comm::algo {

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
  ring::Ring R(comm, dtype, 1);
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

const CollectiveAlgorithm kHalvingDoublingAllReduce{"halving_doubling_all_reduce", Collective::all_reduce, run_reducing<halving_doubling_all_reduce>};

}  // namespace braid::comm::algo
