// Rank topology as a pure function (after Megatron-LM's
// RankGenerator): world rank <-> (tp, dp, pp) coordinates with TP varying
// fastest, then DP, then PP, so a TP group is a block of consecutive ranks and
// lands on one node when ranks are packed by node (keep TP inside a node: its
// collectives sit on the critical path of every layer).
#pragma once
#include <string>
#include <vector>

namespace braid::parallel {

struct RankCoord {
  int tp = 0, dp = 0, pp = 0;
};

class RankGrid {
 public:
  /// Throws ConfigError (naming the degrees and the fix) unless every degree is
  /// >= 1 and tp * dp * pp == world.
  RankGrid(int world, int tp, int dp, int pp = 1);

  int world() const { return world_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }

  /// rank = pp * (dp_size * tp_size) + dp * tp_size + tp.
  RankCoord coord(int rank) const;
  int rank(const RankCoord& c) const;
  /// Ranks of `rank`'s TP / DP / PP group, in increasing order of the group's
  /// own coordinate (which is the rank's position in the group).
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  /// Split colors for Communicator::split: ranks with equal color form a group.
  int tp_color(int rank) const;  // same (dp, pp)
  int dp_color(int rank) const;  // same (tp, pp)
  int pp_color(int rank) const;  // same (tp, dp)

  /// "TP=2 x DP=2 x PP=1 on 4 ranks".
  std::string describe() const;

 private:
  int world_, tp_, dp_, pp_;
};

}  // namespace braid::parallel
