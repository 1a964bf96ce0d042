#include "braid/comm/topology.h"

#include <algorithm>
#include <map>

#include "braid/core/error.h"

namespace braid::comm {

NodeMap::NodeMap(std::vector<int> node_of) : node_of_(std::move(node_of)), local_(node_of_.size()) {
  for (size_t r = 0; r < node_of_.size(); ++r) {
    const auto j = static_cast<size_t>(node_of_[r]);
    if (members_.size() <= j) members_.resize(j + 1);
    local_[r] = static_cast<int>(members_[j].size());
    members_[j].push_back(static_cast<int>(r));
  }
}

NodeMap NodeMap::one_node(int world) { return NodeMap(std::vector<int>(static_cast<size_t>(world), 0)); }

NodeMap NodeMap::from_ids(const std::vector<long long>& ids) {
  std::map<long long, int> number;  // id -> node, in order of first appearance
  std::vector<int> node_of;
  node_of.reserve(ids.size());
  for (long long id : ids) {
    auto it = number.try_emplace(id, static_cast<int>(number.size())).first;
    node_of.push_back(it->second);
  }
  return NodeMap(std::move(node_of));
}

NodeMap NodeMap::blocks(const std::vector<int>& ranks_per_node) {
  std::vector<int> node_of;
  for (size_t j = 0; j < ranks_per_node.size(); ++j) {
    BRAID_CONFIG_CHECK(ranks_per_node[j] >= 1, "node map: node ", j, " has ", ranks_per_node[j],
                       " ranks; every node needs at least 1");
    node_of.insert(node_of.end(), static_cast<size_t>(ranks_per_node[j]), static_cast<int>(j));
  }
  return NodeMap(std::move(node_of));
}

NodeMap NodeMap::parse(const std::string& text) {
  std::vector<int> per;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t plus = std::min(text.find('+', at), text.size());
    const std::string part = text.substr(at, plus - at);
    const bool digits = !part.empty() && part.size() <= 6 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    BRAID_CONFIG_CHECK(digits && std::stoi(part) >= 1, "node map '", text,
                       "': expected ranks per node joined by '+', each >= 1 (for example 2+2 or 2+1)");
    per.push_back(std::stoi(part));
    at = plus + 1;
  }
  return blocks(per);
}

bool NodeMap::even() const {
  for (const auto& m : members_)
    if (m.size() != members_[0].size()) return false;
  return true;
}

int NodeMap::min_local() const {
  size_t m = members_.empty() ? 0 : members_[0].size();
  for (const auto& v : members_) m = std::min(m, v.size());
  return static_cast<int>(m);
}

NodeMap NodeMap::restrict(const std::vector<int>& members) const {
  std::vector<long long> ids;
  ids.reserve(members.size());
  for (int r : members) ids.push_back(node_of(r));
  return from_ids(ids);
}

std::string NodeMap::describe() const {
  std::string per;
  for (const auto& m : members_) {
    if (!per.empty()) per += '+';
    per += std::to_string(m.size());
  }
  const bool blocks = std::is_sorted(node_of_.begin(), node_of_.end());
  return std::to_string(nodes()) + (nodes() == 1 ? " node: " : " nodes: ") + per + " ranks" +
         (blocks ? "" : " (interleaved)");
}

}  // namespace braid::comm
