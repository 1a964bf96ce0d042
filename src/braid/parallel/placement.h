// Where a plan's groups land on the nodes of the world's node map (comm/topology.h:
// the communicator's in `braid train`, the cluster description's in `braid plan`).
// Three rules, one place:
//   - a TP group stays inside one node: its all-reduces sit on every layer's
//     critical path (Megatron-LM places TP within a node for this reason); one that
//     would span nodes is refused unless --tp-across-nodes asks for it;
//   - --fsdp-shard-size node makes HSDP's shard group the DP ranks of one node
//     (PyTorch's HYBRID_SHARD default), refused on nodes that hold different
//     numbers of them;
//   - the start-up log names the node map and, for each group kind, whether its
//     groups span nodes and which path their collectives take.
#pragma once
#include <string>
#include <vector>

#include "braid/parallel/plan.h"

namespace braid::parallel {

/// The world's node map for a job of world_size ranks: o.nodes when it has that many
/// ranks, else one node.
comm::NodeMap world_nodes(const LayoutOptions& o, int world_size);

/// Resolves --fsdp-shard-size node (kShardSizeNode) into the DP ranks one node holds.
/// Throws ConfigError naming the node map when it needs --fsdp, when nodes hold
/// different numbers of a DP group's ranks, or when a node's DP ranks are not
/// consecutive DP ranks. Leaves any other value alone.
void resolve_node_shard_size(LayoutOptions& o, int world_size, const comm::NodeMap& nodes);

/// Throws ConfigError naming the group, its nodes and the fixes when a TP group of
/// `plan` spans nodes and tp_across_nodes is false.
void check_tp_placement(const ParallelPlan& plan, bool tp_across_nodes);

/// "nodes: 2 nodes: 2+2 ranks", then one line per group kind of the plan with more
/// than one rank: how many groups, whether they span nodes, the path taken.
std::vector<std::string> describe_placement(const ParallelPlan& plan);

}  // namespace braid::parallel
