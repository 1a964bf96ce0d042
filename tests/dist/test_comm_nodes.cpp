// Groups that span nodes, without hosts: the local backend placed on a node map runs
// the hierarchical collectives (and the flat ones for what they leave out) over the
// same closed-form suites as one node, for world sizes 1..8, even, uneven and
// interleaved maps. tests/e2e/cluster_collectives.sh runs the suites under MPI on
// emulated hosts with the same maps.
#include <gtest/gtest.h>

#include "braid/comm/backends/local.h"
#include "common/collective_cases.h"

namespace braid {
namespace {

using comm::Communicator;
using comm::NodeMap;
namespace tc = test_cases;

NodeMap map_of(const std::string& text) {
  if (text.find(',') == std::string::npos) return NodeMap::parse(text);
  std::vector<long long> ids;  // "0,1,0,1": the node of each rank
  for (size_t at = 0; at <= text.size();) {
    const size_t comma = std::min(text.find(',', at), text.size());
    ids.push_back(std::stoll(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return NodeMap::from_ids(ids);
}

class CollectiveNodes : public ::testing::TestWithParam<const char*> {
 protected:
  void run(void (*body)(Communicator&)) {
    const NodeMap map = map_of(GetParam());
    comm::run_local(map, [&](Communicator& c) {
      ASSERT_EQ(c.node_map(), map);
      body(c);
    });
  }
};

TEST_P(CollectiveNodes, AllReduce) { run(tc::all_reduce_suite); }
TEST_P(CollectiveNodes, AllGather) { run(tc::all_gather_suite); }
TEST_P(CollectiveNodes, ReduceScatter) { run(tc::reduce_scatter_suite); }
TEST_P(CollectiveNodes, Broadcast) { run(tc::broadcast_suite); }
TEST_P(CollectiveNodes, AllToAll) { run(tc::all_to_all_suite); }
TEST_P(CollectiveNodes, Async) { run(tc::async_suite); }
TEST_P(CollectiveNodes, Split) { run(tc::split_suite); }

// Even, uneven (the all-reduce's fewest-ranks rule; flat reduce-scatter and
// all-gather), one rank per node, and interleaved placements.
INSTANTIATE_TEST_SUITE_P(Maps, CollectiveNodes,
                         ::testing::Values("1+1", "2+1", "1+2", "2+2", "3+1", "1+1+1", "1+3+1", "3+3", "2+2+2",
                                           "4+3", "4+4", "2+2+2+2", "1+1+1+1+1+1+1+1", "0,1,0,1", "0,1,2,0,1,2",
                                           "0,0,1,1,0,1"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           for (char& ch : s)
                             if (ch == '+' || ch == ',') ch = '_';
                           return "nodes_" + s;
                         });

TEST(CollectiveNodesLarge, SeveralChunksPerSlice) {
  for (const char* m : {"2+2", "2+1", "3+3"}) comm::run_local(NodeMap::parse(m), tc::all_reduce_large);
}

TEST(CollectiveNodesMaps, SharedBuffersArePrivate) { comm::run_local(NodeMap::parse("2+1"), tc::shared_buffer_suite); }

TEST(CollectiveNodesMaps, SplitGroupsInheritTheirMembersNodes) {
  comm::run_local(NodeMap::parse("2+2"), [](Communicator& c) {
    auto parity = c.split(c.rank() % 2, c.rank());  // {0, 2} and {1, 3}: one rank per node
    EXPECT_EQ(parity->node_map(), NodeMap::parse("1+1"));
    auto node = c.split(c.rank() / 2, c.rank());  // the ranks of one node
    EXPECT_EQ(node->node_map(), NodeMap::one_node(2));
    auto rev = c.split(0, -c.rank());  // 3 2 | 1 0
    EXPECT_EQ(rev->node_map(), NodeMap::parse("2+2"));
    EXPECT_EQ(rev->node_map().members(0), (std::vector<int>{0, 1}));
  });
}

TEST(CollectiveNodesMaps, OverrideMustMatchNothingElse) {
  EXPECT_THROW(comm::run_local(NodeMap{}, [](Communicator&) {}), ConfigError);
}

}  // namespace
}  // namespace braid
