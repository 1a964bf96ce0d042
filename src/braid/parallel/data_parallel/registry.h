// The data-parallel modes by name: each states when the flags select it, its
// validity rule, what every rank holds of the model states, how to build its
// gradient sync and what that sync allocates. The trainer, the memory planner and
// the cost model ask the mode, never switch over a list of modes. The flags are
// resolved to one mode once, when the plan is made (parallel/plan.cpp).
//
// A mode is registered by a DataParallelMode constant defined next to the GradSync
// class it builds (bucketed_sync.cpp: ddp, zero1; sharded_sync.cpp: zero2, zero3,
// fsdp, hsdp; ps_sync.cpp: ps) and one line in data_parallel_modes() (registry.cpp),
// whose order is the resolution order: the first mode whose `selected` accepts the
// flags wins.
//
// ZeRO stages after Rajbhandari et al. 2020; FSDP and HSDP after Zhao et al. 2023.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/bucketed_sync.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/sharded.h"

namespace braid::parallel {

/// What one rank keeps of a model state: all of it, its 1/S slice of one copy
/// spread over the shard group of S ranks, or nothing (a dedicated server keeps it).
enum class Holding : uint8_t { replica, shard, server };
const char* holding_name(Holding h);

/// What each rank keeps of the three model states (the basis of the memory plan,
/// the cost model and, later, sharded checkpoints).
struct Sharding {
  Holding params, grads, optimizer;
};

/// The data-parallel flags as given on the command line, with the layout they
/// meet. `dp`: the DP degree the other strands leave (the workers under a server).
struct DataParallelFlags {
  std::string dp_mode = "ddp";  // --dp-mode
  int zero = 0;                 // --zero
  bool fsdp = false;            // --fsdp
  int fsdp_shard_size = 0;      // --fsdp-shard-size
  std::string precision = "fp32";
  int tp = 1, pp = 1;
  int world = 1, dp = 1;
};

/// What a mode's gradient sync is built from on one rank. The configurations are
/// filled for the plan whatever the mode; each mode reads the one it runs.
struct GradSyncInputs {
  const model::GPTConfig& cfg;
  const BucketedConfig& bucketed;
  const ShardedConfig& sharded;
  comm::Communicator& world;
  comm::Communicator& dp;
  comm::Communicator& shard;        // the DP group, or an HSDP shard group
  comm::Communicator* replicate;    // HSDP: across shard groups; else null
  MemoryLedger* ledger;
};

/// What the memory plan knows of one rank when it asks a mode.
struct SyncPlanInputs {
  const model::GPTConfig& cfg;
  const BucketedConfig& bucketed;
  const ShardedConfig& sharded;
  int dp_degree = 1, shard_degree = 1;
  int dp_rank = 0;          // -1 on a parameter server
  int rank = 0;             // in the world
  size_t model_params = 0;  // elements of the model's flat parameter buffer on this rank
};

/// A mode's gradient sync's own allocations on one rank, by MemCategory, and the
/// elements of each AdamW moment it keeps. num_params: the parameter elements the
/// sync lays out when it holds them (0: the model's own count).
struct SyncMemory {
  std::array<size_t, kNumMemCategories> bytes{};
  size_t optimizer_elems = 0;
  size_t num_params = 0;
};

/// One data-parallel mode. Immutable; defined once, listed in data_parallel_modes().
struct DataParallelMode {
  const char* name;        // as the start-up line and `braid plan` name it
  const char* summary;     // one line for docs and errors
  int zero_stage;          // the ZeRO stage its states follow (0..3)
  Sharding sharding;
  bool sharded_engine;     // the model's parameters live in the sharding engine (also in fp32)
  bool unit_sharding;      // FSDP: one flat parameter per unit instead of per-tensor shards
  bool shard_groups;       // HSDP: shard within groups of S DP ranks, replicate across them
  bool dedicated_server;   // rank 0 serves and is outside the rank grid
  /// True when the flags ask for this mode (tried in list order).
  bool (*selected)(const DataParallelFlags& f);
  /// Throws ConfigError naming the flags, the reason and the fix when the mode cannot
  /// run with them. Flags that contradict each other whatever the mode are checked
  /// before (parallel/plan.cpp).
  void (*validate)(const DataParallelFlags& f);
  /// Ranks one copy of the sharded states spans (the DP degree unless shard groups).
  int (*shard_degree)(const DataParallelFlags& f);
  /// This rank's gradient sync. Call before building the model over its storage().
  std::unique_ptr<GradSync> (*make)(const GradSyncInputs& in);
  /// What make()'s sync allocates on the rank `in` describes, without allocating.
  SyncMemory (*plan_memory)(const SyncPlanInputs& in);
};

/// For modes without rules of their own, and modes whose copy of the states spans
/// the whole DP group.
inline void no_mode_rules(const DataParallelFlags&) {}
inline int shard_over_dp(const DataParallelFlags& f) { return f.dp; }

/// Every mode, in resolution order (the one list).
const std::vector<const DataParallelMode*>& data_parallel_modes();
/// The first mode whose `selected` accepts `f`, validated (DataParallelMode::validate).
/// Throws ConfigError when none does.
const DataParallelMode& resolve_data_parallel_mode(const DataParallelFlags& f);
/// The mode called `name`; throws ConfigError listing the names when there is none.
const DataParallelMode& data_parallel_mode(std::string_view name);

/// The default mode (plain data parallelism, everything replicated).
extern const DataParallelMode kDdpMode;

}  // namespace braid::parallel
