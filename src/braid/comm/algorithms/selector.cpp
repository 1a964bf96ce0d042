// The policy documented in selector.h: one function per collective, each reading the
// thresholds of RingOptions and nothing else.
#include "braid/comm/algorithms/selector.h"

#include "braid/comm/algorithms/algorithms.h"

namespace braid::comm::algo {

namespace {

bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

const CollectiveAlgorithm& all_reduce(const CollectiveShape& c, const RingOptions& o) {
  const int n = c.world;
  if (n == 1 || c.count == 0) return kRingAllReduce;  // which only copies
  const size_t doubling_max = n == 2 ? o.doubling_all_reduce_max_bytes_2ranks : o.doubling_all_reduce_max_bytes;
  if (pow2(n) && c.bytes() <= doubling_max) return kDoublingAllReduce;
  if (pow2(n) && n > 2 && c.bytes() <= o.halving_all_reduce_max_bytes && c.count >= static_cast<size_t>(n))
    return kHalvingDoublingAllReduce;
  return kRingAllReduce;
}

const CollectiveAlgorithm& all_gather(const CollectiveShape& c, const RingOptions& o) {
  const int n = c.world;
  // Two ranks exchange one block each way: nothing to forward or pipeline.
  if (n == 2) return kDirectAllGather;
  if (n > 2 && c.count > 0) {
    if (pow2(n) && c.bytes() <= o.doubling_all_gather_max_bytes) return kDoublingAllGather;
    if (c.bytes() <= o.direct_all_gather_max_bytes) return kDirectAllGather;
  }
  return kRingAllGather;
}

const CollectiveAlgorithm& all_to_all(const CollectiveShape& c, const RingOptions& o) {
  // Two ranks: one exchange either way; direct overlaps it with the local copy.
  if ((o.direct_all_to_all && c.world > 2) || c.world == 2) return kDirectAllToAll;
  return kPairwiseAllToAll;
}

const CollectiveAlgorithm& broadcast(const CollectiveShape& c, const RingOptions& o) {
  const int n = c.world;
  const size_t bytes = c.bytes();
  if (n == 1 || bytes == 0) return kNoBroadcast;
  if (n > 2 && bytes <= o.flat_broadcast_max_bytes) return kFlatBroadcast;
  if (bytes < o.chain_broadcast_min_bytes || n == 2) return kBinomialBroadcast;  // n = 2: nothing to pipeline
  if (bytes < o.scatter_broadcast_max_bytes) return kScatterAllGatherBroadcast;
  return kChainBroadcast;
}

// The hierarchical path of a group that spans nodes, or null for the flat policy.
const CollectiveAlgorithm* hierarchical(const CollectiveShape& c, const RingOptions& o) {
  if (!o.hierarchical || c.placement.nodes <= 1 || c.count == 0) return nullptr;
  switch (c.op) {
    case Collective::all_reduce:
      return c.count >= static_cast<size_t>(c.placement.min_local) ? &kHierarchicalAllReduce : nullptr;
    case Collective::reduce_scatter: return c.placement.even ? &kHierarchicalReduceScatter : nullptr;
    case Collective::all_gather: return c.placement.even ? &kHierarchicalAllGather : nullptr;
    case Collective::broadcast: return c.elem_bytes > 0 ? &kHierarchicalBroadcast : nullptr;
    default: return nullptr;
  }
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

size_t CollectiveShape::bytes() const {
  const size_t b = count * elem_bytes;
  return op == Collective::all_gather ? static_cast<size_t>(world) * b : b;
}

const CollectiveAlgorithm& select_algorithm(const CollectiveShape& call, const RingOptions& opts) {
  if (const CollectiveAlgorithm* h = hierarchical(call, opts)) return *h;
  switch (call.op) {
    case Collective::all_reduce: return all_reduce(call, opts);
    case Collective::all_gather: return all_gather(call, opts);
    case Collective::reduce_scatter: return kRingReduceScatter;
    case Collective::all_to_all: return all_to_all(call, opts);
    case Collective::broadcast: return broadcast(call, opts);
    case Collective::barrier: return kDisseminationBarrier;
  }
  return kDisseminationBarrier;
}

}  // namespace braid::comm::algo
