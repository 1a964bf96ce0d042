// The BRAID_COMM_* tuning variables: each sets the member its name says, values
// are checked, and a variable under its former name is refused, not ignored.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "braid/comm/algorithms/algorithms.h"
#include "braid/core/error.h"

namespace braid {
namespace {

using comm::algo::RingOptions;

RingOptions with(const std::map<std::string, std::string>& env) {
  RingOptions o;
  comm::algo::apply_env(o, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  return o;
}

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    with(env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CommEnv, EachVariableSetsTheMemberItNames) {
  const RingOptions d;
  EXPECT_EQ(with({}).chunk_bytes, d.chunk_bytes);
  const RingOptions o = with({{"BRAID_COMM_RING_CHUNK_BYTES", "4096"},
                              {"BRAID_COMM_RING_RECVS_AHEAD", "2"},
                              {"BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES", "11"},
                              {"BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES_2RANKS", "12"},
                              {"BRAID_COMM_ALLREDUCE_HALVING_MAX_BYTES", "13"},
                              {"BRAID_COMM_ALLGATHER_DOUBLING_MAX_BYTES", "14"},
                              {"BRAID_COMM_ALLGATHER_DIRECT_MAX_BYTES", "15"},
                              {"BRAID_COMM_ALLTOALL_ONE_ROUND", "0"},
                              {"BRAID_COMM_BROADCAST_TREE_MAX_BYTES", "16"},
                              {"BRAID_COMM_BROADCAST_FLAT_MAX_BYTES", "17"},
                              {"BRAID_COMM_BROADCAST_SCATTER_MAX_BYTES", "0"}});
  EXPECT_EQ(o.chunk_bytes, 4096u);
  EXPECT_EQ(o.depth, 2);
  EXPECT_EQ(o.doubling_all_reduce_max_bytes, 11u);
  EXPECT_EQ(o.doubling_all_reduce_max_bytes_2ranks, 12u);
  EXPECT_EQ(o.halving_all_reduce_max_bytes, 13u);
  EXPECT_EQ(o.doubling_all_gather_max_bytes, 14u);
  EXPECT_EQ(o.direct_all_gather_max_bytes, 15u);
  EXPECT_FALSE(o.direct_all_to_all);
  EXPECT_EQ(o.chain_broadcast_min_bytes, 16u);
  EXPECT_EQ(o.flat_broadcast_max_bytes, 17u);
  EXPECT_EQ(o.scatter_broadcast_max_bytes, 0u);
  EXPECT_EQ(comm::algo::env_names().size(), 12u);
}

TEST(CommEnv, BadValuesNameTheVariableAndTheValue) {
  for (const auto& [name, value] : std::map<std::string, std::string>{{"BRAID_COMM_RING_CHUNK_BYTES", "0"},
                                                                       {"BRAID_COMM_RING_CHUNK_BYTES", "1M"},
                                                                       {"BRAID_COMM_RING_RECVS_AHEAD", "0"},
                                                                       {"BRAID_COMM_ALLTOALL_ONE_ROUND", "2"},
                                                                       {"BRAID_COMM_BROADCAST_FLAT_MAX_BYTES", "-5"}}) {
    const std::string e = error_of({{name, value}});
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_NE(e.find("'" + value + "'"), std::string::npos) << e;
  }
  EXPECT_NE(error_of({{"BRAID_COMM_RING_RECVS_AHEAD", "65"}}).find("[1, 64]"), std::string::npos);
}

TEST(CommEnv, AMisspelledVariableIsRefused) {
  EXPECT_NO_THROW(comm::algo::check_env_names({"PATH", "BRAID_COMM_RING_RECVS_AHEAD", "BRAID_DATA_PACKAGES"}));
  try {
    comm::algo::check_env_names({"BRAID_COMM_RING_CHUNK"});
    ADD_FAILURE() << "a misspelled variable passed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_COMM_RING_CHUNK is not a variable braid reads"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("BRAID_COMM_RING_CHUNK_BYTES"), std::string::npos);
  }
}

TEST(CommEnv, AFormerNameIsRefusedWithTheNewOne) {
  const std::string e = error_of({{"BRAID_COMM_DEPTH", "2"}});
  EXPECT_NE(e.find("BRAID_COMM_DEPTH was renamed BRAID_COMM_RING_RECVS_AHEAD"), std::string::npos) << e;
  EXPECT_NE(error_of({{"BRAID_COMM_AR_DOUBLING_MAX_2RANKS", "1"}}).find("BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES_2RANKS"),
            std::string::npos);
}

}  // namespace
}  // namespace braid
