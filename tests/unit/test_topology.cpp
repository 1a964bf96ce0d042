// RankGrid is a pure function: checked without processes.
#include <gtest/gtest.h>

#include <set>

#include "braid/core/error.h"
#include "braid/parallel/topology.h"

using namespace braid;

TEST(RankGrid, CoordinatesRoundTripAndGroupsPartitionTheWorld) {
  for (int tp : {1, 2, 3, 4}) {
    for (int dp : {1, 2, 3}) {
      for (int pp : {1, 2}) {
        const int world = tp * dp * pp;
        parallel::RankGrid g(world, tp, dp, pp);
        std::set<int> tp_colors, dp_colors;
        for (int r = 0; r < world; ++r) {
          const auto c = g.coord(r);
          EXPECT_EQ(g.rank(c), r);
          EXPECT_EQ(c.tp, r % tp) << "TP varies fastest";
          const auto t = g.tp_group(r);
          ASSERT_EQ(static_cast<int>(t.size()), tp);
          EXPECT_EQ(t[static_cast<size_t>(c.tp)], r);
          for (size_t i = 1; i < t.size(); ++i) EXPECT_EQ(t[i], t[i - 1] + 1) << "TP ranks are consecutive";
          const auto d = g.dp_group(r);
          ASSERT_EQ(static_cast<int>(d.size()), dp);
          EXPECT_EQ(d[static_cast<size_t>(c.dp)], r);
          for (int q : d) EXPECT_EQ(g.coord(q).tp, c.tp);
          for (int q : t) EXPECT_EQ(g.tp_color(q), g.tp_color(r));
          for (int q : d) EXPECT_EQ(g.dp_color(q), g.dp_color(r));
          EXPECT_EQ(static_cast<int>(g.pp_group(r).size()), pp);
          tp_colors.insert(g.tp_color(r));
          dp_colors.insert(g.dp_color(r));
        }
        EXPECT_EQ(static_cast<int>(tp_colors.size()), dp * pp);
        EXPECT_EQ(static_cast<int>(dp_colors.size()), tp * pp);
      }
    }
  }
}

TEST(RankGrid, BadDegreesNameTheFix) {
  try {
    parallel::RankGrid g(6, 4, 1);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must equal the number of ranks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parallel::RankGrid(4, 0, 4), ConfigError);
}
