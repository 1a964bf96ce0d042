#include "braid/parallel/placement.h"

#include <algorithm>
#include <set>

#include "braid/core/error.h"

namespace braid::parallel {

namespace {

// The nodes a group of world ranks touches.
std::set<int> nodes_of(const std::vector<int>& group, const comm::NodeMap& nodes) {
  std::set<int> out;
  for (int r : group) out.insert(nodes.node_of(r));
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// Every group of one kind, each listed once (by its lowest rank).
using GroupsOf = std::vector<int> (RankGrid::*)(int) const;
std::vector<std::vector<int>> all_groups(const RankGrid& g, GroupsOf of) {
  std::set<std::vector<int>> seen;
  for (int r = 0; r < g.world(); ++r) seen.insert((g.*of)(r));
  return {seen.begin(), seen.end()};
}

// HSDP's shard groups (blocks of S consecutive DP ranks) or replica groups (stride S).
std::vector<std::vector<int>> hsdp_groups(const std::vector<std::vector<int>>& dp_groups, int S, bool shard) {
  std::vector<std::vector<int>> out;
  for (const auto& dp : dp_groups) {
    const int n = static_cast<int>(dp.size());
    for (int b = 0; b < (shard ? n / S : S); ++b) {
      std::vector<int> g;
      for (int i = 0; i < (shard ? S : n / S); ++i) g.push_back(dp[static_cast<size_t>(shard ? b * S + i : b + i * S)]);
      out.push_back(g);
    }
  }
  return out;
}

// "dp: 1 group of 4 ranks, spans 2 nodes (2+2): hierarchical ..."
std::string group_line(const char* kind, const std::vector<std::vector<int>>& groups, const comm::NodeMap& nodes,
                       bool point_to_point) {
  bool spans = false, uneven = false;
  for (const auto& g : groups) {
    const comm::NodeMap sub = nodes.restrict(g);
    spans = spans || sub.nodes() > 1;
    uneven = uneven || (sub.nodes() > 1 && !sub.even());
  }
  const size_t size = groups.empty() ? 0 : groups[0].size();
  std::string s = std::string(kind) + ": " + std::to_string(groups.size()) + " group" +
                  (groups.size() == 1 ? "" : "s") + " of " + std::to_string(size) + " ranks, ";
  if (!spans) return s + "each inside one node: shared memory";
  if (point_to_point) return s + "stage boundaries cross nodes: whole activations by point-to-point messages";
  if (uneven)
    return s + "span uneven nodes: hierarchical all-reduce and broadcast, flat ring reduce-scatter and all-gather";
  return s + "span nodes: hierarchical (inside each node, across nodes by rails, inside again)";
}

}  // namespace

comm::NodeMap world_nodes(const LayoutOptions& o, int world_size) {
  return o.nodes.world() == world_size ? o.nodes : comm::NodeMap::one_node(world_size);
}

void resolve_node_shard_size(LayoutOptions& o, int world_size, const comm::NodeMap& nodes) {
  if (o.fsdp_shard_size != kShardSizeNode) return;
  BRAID_CONFIG_CHECK(o.fsdp, "--fsdp-shard-size node (hybrid sharding) needs --fsdp");
  o.fsdp_shard_size = 0;  // an invalid layout is left to the degree checks
  if (o.tp < 1 || o.pp < 1 || o.dp_mode != "ddp" || world_size % (int64_t{o.tp} * o.pp) != 0) return;
  const RankGrid grid(world_size, o.tp, world_size / (o.tp * o.pp), o.pp);
  int S = 0;
  for (const auto& dp : all_groups(grid, &RankGrid::dp_group)) {
    const comm::NodeMap sub = nodes.restrict(dp);
    BRAID_CONFIG_CHECK(sub.even(), "--fsdp-shard-size node: the nodes (", nodes.describe(), ") hold ",
                       sub.describe(), " of data-parallel group {", join(dp),
                       "}; a shard group per node needs every node to hold as many; give a size instead "
                       "(--fsdp-shard-size S, S dividing ", dp.size(), ")");
    const int per = static_cast<int>(sub.members(0).size());
    for (int j = 0; j < sub.nodes(); ++j)
      BRAID_CONFIG_CHECK(sub.members(j).back() - sub.members(j).front() == per - 1,
                         "--fsdp-shard-size node: the data-parallel ranks of group {", join(dp), "} on node ", j,
                         " are not consecutive (node map ", nodes.describe(),
                         "); place ranks by node (mpirun --map-by slot) or give a size (--fsdp-shard-size S)");
    S = per;
  }
  o.fsdp_shard_size = S;
}

void check_tp_placement(const ParallelPlan& plan, bool tp_across_nodes) {
  if (plan.tp.degree == 1 || tp_across_nodes) return;
  for (const auto& g : all_groups(plan.grid(), &RankGrid::tp_group)) {
    const std::set<int> on = nodes_of(g, plan.nodes);
    BRAID_CONFIG_CHECK(on.size() == 1, "--tp ", plan.tp.degree, ": the TP group of ranks {", join(g), "} spans ",
                       on.size(), " nodes (", plan.nodes.describe(),
                       "); TP's all-reduces sit on every layer's critical path, so a TP group stays inside one "
                       "node: use a TP degree that divides the ranks of each node, or pass --tp-across-nodes to "
                       "run it across the link anyway");
  }
}

std::vector<std::string> describe_placement(const ParallelPlan& plan) {
  std::vector<std::string> out{"nodes: " + plan.nodes.describe()};
  if (plan.dp.parameter_server()) {
    out.push_back(group_line("parameter server", {plan.grid().dp_group(0)}, plan.nodes, true));
    return out;
  }
  const RankGrid g = plan.grid();
  const auto dp = all_groups(g, &RankGrid::dp_group);
  if (plan.tp.degree > 1) out.push_back(group_line("tp", all_groups(g, &RankGrid::tp_group), plan.nodes, false));
  if (plan.dp.degree > 1) out.push_back(group_line("dp", dp, plan.nodes, false));
  if (plan.hsdp()) {
    out.push_back(group_line("hsdp shard", hsdp_groups(dp, plan.dp.shard_degree, true), plan.nodes, false));
    out.push_back(group_line("hsdp replicate", hsdp_groups(dp, plan.dp.shard_degree, false), plan.nodes, false));
  }
  if (plan.pp.stages > 1) out.push_back(group_line("pp", all_groups(g, &RankGrid::pp_group), plan.nodes, true));
  return out;
}

}  // namespace braid::parallel
