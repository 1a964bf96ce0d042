// The data-parallel modes: the flags select each mode as they always did, what each
// keeps is stated, and a mode's own rules refuse what it cannot run.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "braid/core/error.h"
#include "braid/parallel/data_parallel/registry.h"

namespace braid {
namespace {

using parallel::DataParallelFlags;
using parallel::Holding;

DataParallelFlags flags(int zero, bool fsdp = false, int shard_size = 0, int dp = 8) {
  DataParallelFlags f;
  f.zero = zero;
  f.fsdp = fsdp;
  f.fsdp_shard_size = shard_size;
  f.world = f.dp = dp;
  return f;
}

std::string mode_of(const DataParallelFlags& f) { return parallel::resolve_data_parallel_mode(f).name; }

TEST(DataParallelRegistry, FlagsSelectTheModes) {
  EXPECT_EQ(mode_of(flags(0)), "ddp");
  EXPECT_EQ(mode_of(flags(1)), "zero1");
  EXPECT_EQ(mode_of(flags(2)), "zero2");
  EXPECT_EQ(mode_of(flags(3)), "zero3");
  EXPECT_EQ(mode_of(flags(0, true)), "fsdp");
  EXPECT_EQ(mode_of(flags(3, true)), "fsdp");
  EXPECT_EQ(mode_of(flags(0, true, 4)), "hsdp");
  EXPECT_EQ(mode_of(flags(0, true, 8)), "fsdp");  // one shard group spanning DP: plain FSDP
  DataParallelFlags ps = flags(0);
  ps.dp_mode = "ps";
  ps.world = 3;
  ps.dp = 2;
  EXPECT_EQ(mode_of(ps), "ps");
}

TEST(DataParallelRegistry, WhatEachRankKeeps) {
  struct Row {
    const char* name;
    int stage;
    Holding params, grads, optimizer;
  };
  const Row rows[] = {
      {"ddp", 0, Holding::replica, Holding::replica, Holding::replica},
      {"zero1", 1, Holding::replica, Holding::replica, Holding::shard},
      {"zero2", 2, Holding::replica, Holding::shard, Holding::shard},
      {"zero3", 3, Holding::shard, Holding::shard, Holding::shard},
      {"fsdp", 3, Holding::shard, Holding::shard, Holding::shard},
      {"hsdp", 3, Holding::shard, Holding::shard, Holding::shard},
      {"ps", 0, Holding::replica, Holding::replica, Holding::server},
  };
  for (const Row& r : rows) {
    const parallel::DataParallelMode& m = parallel::data_parallel_mode(r.name);
    EXPECT_EQ(m.zero_stage, r.stage) << r.name;
    EXPECT_EQ(m.sharding.params, r.params) << r.name;
    EXPECT_EQ(m.sharding.grads, r.grads) << r.name;
    EXPECT_EQ(m.sharding.optimizer, r.optimizer) << r.name;
    // The sharding engine runs exactly the modes that shard gradients.
    EXPECT_EQ(m.sharded_engine, m.sharding.grads == Holding::shard) << r.name;
  }
  EXPECT_EQ(parallel::data_parallel_modes().size(), std::size(rows));
  EXPECT_STREQ(parallel::holding_name(Holding::server), "server");
}

TEST(DataParallelRegistry, NamesAreUniqueAndEveryModeIsComplete) {
  std::set<std::string> names;
  for (const parallel::DataParallelMode* m : parallel::data_parallel_modes()) {
    EXPECT_TRUE(names.insert(m->name).second) << m->name;
    EXPECT_TRUE(m->summary && *m->summary) << m->name;
    EXPECT_TRUE(m->selected && m->validate && m->shard_degree && m->make && m->plan_memory) << m->name;
  }
  EXPECT_STREQ(parallel::kDdpMode.name, "ddp");
}

TEST(DataParallelRegistry, ShardDegree) {
  EXPECT_EQ(parallel::data_parallel_mode("hsdp").shard_degree(flags(0, true, 4)), 4);
  EXPECT_EQ(parallel::data_parallel_mode("fsdp").shard_degree(flags(0, true)), 8);
  EXPECT_EQ(parallel::data_parallel_mode("zero1").shard_degree(flags(1)), 8);
}

std::string error_of(const DataParallelFlags& f) {
  try {
    parallel::resolve_data_parallel_mode(f);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DataParallelRegistry, ParameterServerRules) {
  DataParallelFlags ps = flags(0);
  ps.dp_mode = "ps";
  ps.world = 1;
  EXPECT_NE(error_of(ps).find("needs at least 2 ranks"), std::string::npos) << error_of(ps);
  ps.world = 3;
  ps.tp = 2;
  EXPECT_NE(error_of(ps).find("drop --tp 2"), std::string::npos) << error_of(ps);
  ps.tp = 1;
  ps.pp = 2;
  EXPECT_NE(error_of(ps).find("drop --dp-mode ps"), std::string::npos) << error_of(ps);
  ps.pp = 1;
  ps.precision = "bf16";
  EXPECT_NE(error_of(ps).find("drop --precision bf16"), std::string::npos) << error_of(ps);
  ps.precision = "fp32";
  ps.zero = 1;
  EXPECT_NE(error_of(ps).find("use --zero 0"), std::string::npos) << error_of(ps);
}

TEST(DataParallelRegistry, UnknownName) {
  try {
    parallel::data_parallel_mode("zero4");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero1, ddp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid
