// Elastic restart (`braid run --elastic`): when a job ends with a rank failure
// (exit code 4), find the hosts that still answer, pick the largest layout
// their slots can run (TP, PP and CP kept, DP smaller, the global batch kept by
// gradient accumulation), check its memory plan, and relaunch from the newest
// checkpoint that verifies, until the job finishes, the restarts are used up,
// or too few hosts remain. The same idea as TorchElastic's --nnodes MIN:MAX
// with --max-restarts, over an MPI launcher.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "braid/launch/job.h"
#include "braid/launch/launch_command.h"
#include "braid/train/options.h"

namespace braid::launch {

/// A layout for the ranks that remain.
struct ElasticLayout {
  int world = 0;            // ranks
  int dp = 0;               // data-parallel degree (TP, PP, CP as before)
  int64_t micro_batch = 0;  // sequences per forward/backward on one rank
  int64_t accumulation = 1; // micro-batches per step on one rank (per pipeline under PP)
  uint64_t peak_bytes = 0;  // the worst rank's planned peak
  std::vector<std::string> flags;  // braid train flags that select it (appended to the command)
  std::string describe() const;    // "4 ranks: DP 2 x TP 2 x PP 1, micro-batch 4 x 2 accumulated"
};

/// The largest layout of `opt` on at most `slots` ranks: world sizes from
/// `slots` down, each with the user's micro-batch when it still divides the
/// rank's share of the global batch, else the largest that does; a layout must
/// pass the plan's checks and fit `budget_bytes` per rank (0: not checked).
/// None when nothing fits; *why then says, per world size tried, what refused it.
std::optional<ElasticLayout> choose_layout(const train::TrainOptions& opt, int slots, uint64_t budget_bytes,
                                           std::string* why);

struct ElasticOptions {
  int min_nodes = 1;          // stop below this many hosts
  int max_restarts = 3;       // stop after this many restarts
  double probe_timeout_s = 15;  // a host whose probe does not finish in time is gone
  JobOptions job;
};

/// Whether `host` answers a launch through the command's launcher (a one-rank
/// `true` there, within `timeout_s`).
bool probe_host(const LaunchCommand& cmd, const std::string& host, double timeout_s);

/// Runs `cmd` (its program `braid train`, whose options are `opt`) under
/// elastic restart; returns the exit code for `braid run`. Logs every launch
/// and restart (cause, hosts lost, new layout, steps lost) on stderr, each line
/// starting "braid run:". Throws ConfigError when the command cannot restart
/// (no hosts named, no --save).
int run_elastic(const LaunchCommand& cmd, const train::TrainOptions& opt, const ElasticOptions& eo);

}  // namespace braid::launch
