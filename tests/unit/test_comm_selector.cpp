// The selector's choices pinned at the edges of its thresholds: which algorithm runs
// an (op, size, world) must not change unless the policy is changed on purpose.
#include <gtest/gtest.h>

#include <string>

#include "braid/comm/algorithms/algorithms.h"

namespace braid {
namespace {

using comm::algo::Collective;
using comm::algo::RingOptions;

constexpr size_t KiB = size_t{1} << 10, MiB = size_t{1} << 20;

// The name of the algorithm chosen for `count` f32 elements (4 bytes each) on `world` ranks.
std::string pick(Collective op, int world, size_t count, const RingOptions& o = {}) {
  const comm::algo::CollectiveShape s{op, count, 4, world, {}};
  const comm::algo::CollectiveAlgorithm& a = comm::algo::select_algorithm(s, o);
  EXPECT_EQ(a.op, op) << a.name << " runs " << comm::algo::collective_name(a.op);
  return a.name;
}

TEST(CommSelector, AllReduceTwoRanks) {
  EXPECT_EQ(pick(Collective::all_reduce, 2, 1), "doubling_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 2, 8 * MiB / 4), "doubling_all_reduce");  // 8 MiB: inclusive
  EXPECT_EQ(pick(Collective::all_reduce, 2, 8 * MiB / 4 + 1), "ring_all_reduce");
}

TEST(CommSelector, AllReducePowerOfTwo) {
  EXPECT_EQ(pick(Collective::all_reduce, 4, 128 * KiB / 4), "doubling_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 4, 128 * KiB / 4 + 1), "halving_doubling_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 4, MiB / 4), "halving_doubling_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 4, MiB / 4 + 1), "ring_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 8, 128 * KiB / 4 + 1), "halving_doubling_all_reduce");
  // Halving needs at least one element per rank: with a tiny doubling max, count < n rings.
  RingOptions o;
  o.doubling_all_reduce_max_bytes = 0;
  EXPECT_EQ(pick(Collective::all_reduce, 8, 7, o), "ring_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 8, 8, o), "halving_doubling_all_reduce");
}

TEST(CommSelector, AllReduceOtherSizes) {
  EXPECT_EQ(pick(Collective::all_reduce, 3, 1), "ring_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 6, 1), "ring_all_reduce");
  EXPECT_EQ(pick(Collective::all_reduce, 1, 100), "ring_all_reduce");  // a copy
  EXPECT_EQ(pick(Collective::all_reduce, 4, 0), "ring_all_reduce");    // nothing to do
}

TEST(CommSelector, ReduceScatterIsTheRing) {
  for (int n : {1, 2, 3, 4, 8})
    for (size_t count : {size_t{0}, size_t{1}, 64 * MiB}) EXPECT_EQ(pick(Collective::reduce_scatter, n, count), "ring_reduce_scatter");
}

TEST(CommSelector, AllGather) {
  // Output bytes = world * count * 4 against 32 MiB.
  EXPECT_EQ(pick(Collective::all_gather, 2, 0), "direct_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 2, 64 * MiB), "direct_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 4, 32 * MiB / 16), "doubling_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 4, 32 * MiB / 16 + 1), "ring_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 4, 0), "ring_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 3, 1), "direct_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 3, 32 * MiB / 12 + 1), "ring_all_gather");
  EXPECT_EQ(pick(Collective::all_gather, 1, 5), "ring_all_gather");
  RingOptions o;
  o.doubling_all_gather_max_bytes = 0;
  EXPECT_EQ(pick(Collective::all_gather, 4, 1, o), "direct_all_gather");
}

TEST(CommSelector, AllToAll) {
  RingOptions pairwise;
  pairwise.direct_all_to_all = false;
  EXPECT_EQ(pick(Collective::all_to_all, 2, 10), "direct_all_to_all");
  EXPECT_EQ(pick(Collective::all_to_all, 2, 10, pairwise), "direct_all_to_all");
  EXPECT_EQ(pick(Collective::all_to_all, 3, 10), "direct_all_to_all");
  EXPECT_EQ(pick(Collective::all_to_all, 3, 10, pairwise), "pairwise_all_to_all");
  EXPECT_EQ(pick(Collective::all_to_all, 1, 10), "pairwise_all_to_all");
}

TEST(CommSelector, Broadcast) {
  EXPECT_EQ(pick(Collective::broadcast, 1, 10), "no_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 4, 0), "no_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 3, 4 * MiB / 4), "flat_broadcast");  // inclusive
  EXPECT_EQ(pick(Collective::broadcast, 3, 4 * MiB / 4 + 1), "scatter_allgather_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 4, 32 * MiB / 4 - 1), "scatter_allgather_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 4, 32 * MiB / 4), "chain_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 2, 1), "binomial_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 2, 64 * MiB), "binomial_broadcast");
  RingOptions o;
  o.flat_broadcast_max_bytes = 0;
  EXPECT_EQ(pick(Collective::broadcast, 4, 256 * KiB / 4 - 1, o), "binomial_broadcast");
  EXPECT_EQ(pick(Collective::broadcast, 4, 256 * KiB / 4, o), "scatter_allgather_broadcast");
}

TEST(CommSelector, Barrier) { EXPECT_EQ(pick(Collective::barrier, 5, 0), "dissemination_barrier"); }

TEST(CommSelector, GroupsThatSpanNodesGoHierarchical) {
  using comm::algo::CollectiveShape;
  using comm::algo::NodeShape;
  auto name = [](Collective op, size_t count, NodeShape where, RingOptions o = {}) {
    return std::string(comm::algo::select_algorithm(CollectiveShape{op, count, 4, 4, where}, o).name);
  };
  const NodeShape even{2, true, 2}, uneven{2, false, 1}, one{};
  EXPECT_EQ(name(Collective::all_reduce, 1, one), "doubling_all_reduce");
  EXPECT_EQ(name(Collective::all_reduce, 1, uneven), "hierarchical_all_reduce");
  EXPECT_EQ(name(Collective::all_reduce, 2, even), "hierarchical_all_reduce");
  EXPECT_EQ(name(Collective::all_reduce, 1, even), "doubling_all_reduce");  // fewer elements than slices
  EXPECT_EQ(name(Collective::all_reduce, 0, even), "ring_all_reduce");      // only copies
  EXPECT_EQ(name(Collective::reduce_scatter, 8, even), "hierarchical_reduce_scatter");
  EXPECT_EQ(name(Collective::reduce_scatter, 8, uneven), "ring_reduce_scatter");  // the stated rule
  EXPECT_EQ(name(Collective::all_gather, 8, even), "hierarchical_all_gather");
  EXPECT_EQ(name(Collective::all_gather, 8, uneven), "doubling_all_gather");
  EXPECT_EQ(name(Collective::broadcast, 8, uneven), "hierarchical_broadcast");
  EXPECT_EQ(name(Collective::broadcast, 0, uneven), "no_broadcast");
  EXPECT_EQ(name(Collective::all_to_all, 8, even), "direct_all_to_all");  // out of scope: flat
  EXPECT_EQ(name(Collective::barrier, 0, even), "dissemination_barrier");
  RingOptions flat;
  flat.hierarchical = false;
  EXPECT_EQ(name(Collective::all_reduce, 1 << 20, even, flat), "ring_all_reduce");
  EXPECT_EQ(name(Collective::broadcast, 8, even, flat), "flat_broadcast");
}

TEST(CommSelector, NodeMaps) {
  using comm::NodeMap;
  const NodeMap m = NodeMap::parse("2+1");
  EXPECT_EQ(m.world(), 3);
  EXPECT_EQ(m.nodes(), 2);
  EXPECT_FALSE(m.even());
  EXPECT_EQ(m.min_local(), 1);
  EXPECT_EQ(m.local_rank(2), 0);
  EXPECT_EQ(m.describe(), "2 nodes: 2+1 ranks");
  EXPECT_EQ(NodeMap::from_ids({7, 3, 7, 3}).describe(), "2 nodes: 2+2 ranks (interleaved)");
  EXPECT_EQ(NodeMap::from_ids({7, 3, 7, 3}).members(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(NodeMap::parse("2+2").restrict({1, 3}), NodeMap::parse("1+1"));
  EXPECT_EQ(NodeMap::parse("2+2").restrict({0, 1}), NodeMap::one_node(2));
  EXPECT_EQ(NodeMap::one_node(4).describe(), "1 node: 4 ranks");
  for (const char* bad : {"", "2+", "+2", "0+2", "2+x", "1234567"}) EXPECT_THROW(NodeMap::parse(bad), ConfigError) << bad;
}

}  // namespace
}  // namespace braid
