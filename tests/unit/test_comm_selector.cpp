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

TEST(CommSelector, NodeMap) {
  EXPECT_EQ(comm::algo::NodeMap{}.nodes(8), 1);
  EXPECT_EQ(comm::algo::NodeMap{4}.nodes(8), 2);
  EXPECT_EQ(comm::algo::NodeMap{4}.nodes(9), 3);
  EXPECT_EQ(comm::algo::NodeMap{8}.nodes(4), 1);
  // Every group is one node today: a node map does not change the choice yet.
  const comm::algo::CollectiveShape s{Collective::all_reduce, 1, 4, 4, comm::algo::NodeMap{2}};
  EXPECT_STREQ(comm::algo::select_algorithm(s, {}).name, "doubling_all_reduce");
}

}  // namespace
}  // namespace braid
