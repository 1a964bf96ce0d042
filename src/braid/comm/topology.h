// Where the ranks of a group live: the node map. A node is a set of ranks that share
// memory (one host); a group whose ranks sit on more than one node spans nodes, and
// its collectives take the hierarchical path (algorithms/hierarchical.h): inside each
// node over shared memory, across nodes by messages.
//
// Where a map comes from: the MPI backend splits its world by MPI_COMM_TYPE_SHARED
// (the ranks of one host) and every group split from a communicator inherits its
// parent's map restricted to its members; the local backend (ranks as threads) takes
// one as an override (run_local), so hierarchical collectives are tested without hosts.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace braid::comm {

/// node_of[r]: the node of group rank r. Nodes are numbered 0.. in the order of their
/// lowest rank, so equal placements give equal maps whatever the ids they came from.
class NodeMap {
 public:
  NodeMap() = default;
  /// Every one of `world` ranks on one node.
  static NodeMap one_node(int world);
  /// Rank r on the node with id ids[r] (any integers; equal ids, same node).
  static NodeMap from_ids(const std::vector<long long>& ids);
  /// Consecutive ranks per node: {2, 1} puts ranks 0, 1 on node 0 and rank 2 on node 1.
  /// Throws ConfigError when a count is < 1.
  static NodeMap blocks(const std::vector<int>& ranks_per_node);
  /// Parses "2+2" or "2+1" (the blocks form); throws ConfigError naming the text.
  static NodeMap parse(const std::string& text);

  int world() const { return static_cast<int>(node_of_.size()); }
  int nodes() const { return static_cast<int>(members_.size()); }
  int node_of(int rank) const { return node_of_[static_cast<size_t>(rank)]; }
  /// The group ranks on node j, ascending; a rank's place in it is its local rank.
  const std::vector<int>& members(int node) const { return members_[static_cast<size_t>(node)]; }
  int local_rank(int rank) const { return local_[static_cast<size_t>(rank)]; }
  /// Whether every node holds the same number of the group's ranks.
  bool even() const;
  /// Fewest ranks on one node (0 for an empty map).
  int min_local() const;
  /// The map of a group whose rank i is this group's rank members[i].
  NodeMap restrict(const std::vector<int>& members) const;
  /// "2 nodes: 2+1 ranks" or "1 node: 4 ranks".
  std::string describe() const;
  bool operator==(const NodeMap& o) const { return node_of_ == o.node_of_; }

 private:
  explicit NodeMap(std::vector<int> node_of);
  std::vector<int> node_of_, local_;
  std::vector<std::vector<int>> members_;
};

}  // namespace braid::comm
