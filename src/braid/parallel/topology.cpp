#include "braid/parallel/topology.h"

#include "braid/core/error.h"

namespace braid::parallel {

RankGrid::RankGrid(int world, int tp, int dp, int pp) : world_(world), tp_(tp), dp_(dp), pp_(pp) {
  BRAID_CONFIG_CHECK(tp >= 1 && dp >= 1 && pp >= 1, "parallel degrees must be >= 1: --tp ", tp,
                     ", dp ", dp, ", --pp ", pp);
  BRAID_CONFIG_CHECK(static_cast<long long>(tp) * dp * pp == world, "--tp ", tp, " x dp ", dp,
                     " x --pp ", pp, " = ", static_cast<long long>(tp) * dp * pp, " but the job has ",
                     world, " ranks; the product of the parallel degrees must equal the number of ranks");
}

RankCoord RankGrid::coord(int rank) const {
  BRAID_CHECK(rank >= 0 && rank < world_, "rank ", rank, " outside [0, ", world_, ")");
  RankCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  return c;
}

int RankGrid::rank(const RankCoord& c) const {
  BRAID_CHECK(c.tp >= 0 && c.tp < tp_ && c.dp >= 0 && c.dp < dp_ && c.pp >= 0 && c.pp < pp_,
              "coordinate (tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, ") outside ", describe());
  return c.pp * (dp_ * tp_) + c.dp * tp_ + c.tp;
}

std::vector<int> RankGrid::tp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::dp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp) g.push_back(rank(c));
  return g;
}

std::vector<int> RankGrid::pp_group(int r) const {
  RankCoord c = coord(r);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank(c));
  return g;
}

int RankGrid::tp_color(int r) const {
  const RankCoord c = coord(r);
  return c.pp * dp_ + c.dp;
}

int RankGrid::dp_color(int r) const {
  const RankCoord c = coord(r);
  return c.pp * tp_ + c.tp;
}

int RankGrid::pp_color(int r) const {
  const RankCoord c = coord(r);
  return c.dp * tp_ + c.tp;
}

std::string RankGrid::describe() const {
  return "TP=" + std::to_string(tp_) + " x DP=" + std::to_string(dp_) + " x PP=" + std::to_string(pp_) +
         " on " + std::to_string(world_) + " ranks";
}

}  // namespace braid::parallel
