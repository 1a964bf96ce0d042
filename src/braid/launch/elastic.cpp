#include "braid/launch/elastic.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/host_memory.h"
#include "braid/parallel/plan.h"
#include "braid/train/checkpoint_dir.h"
#include "braid/train/memory_check.h"

namespace braid::launch {

namespace {

void log(const std::string& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "braid run: %s\n", s.c_str());
  std::fflush(stderr);
}

// The plan of `opt` on `world` ranks; throws ConfigError when the layout cannot run.
parallel::ParallelPlan resolve(train::TrainOptions opt, int world) {
  parallel::ParallelPlan plan = parallel::resolve_plan(opt, world, parallel::model_config(opt));
  train::validate_training(opt, world);
  return plan;
}

// Micro-batches to try for a rank's share of the batch: the user's (or auto),
// then every divisor of the share below `cap`, largest first.
std::vector<int64_t> micro_batch_candidates(const train::TrainOptions& opt, int64_t cap, int64_t share) {
  std::vector<int64_t> out = {opt.micro_batch};
  for (int64_t m = std::min(cap, share); m >= 1; --m)
    if (share % m == 0 && m != opt.micro_batch) out.push_back(m);
  return out;
}

// The layout of `opt` on `world` ranks with micro-batch `mb` (kMicroBatchAuto:
// the plan's), or the reason it is refused.
std::optional<ElasticLayout> try_layout(train::TrainOptions opt, int world, int64_t mb, uint64_t budget,
                                        std::string* why) {
  const bool changed = mb != opt.micro_batch;
  const int64_t given_micro_batches = opt.micro_batches;
  if (changed) {
    opt.micro_batch = mb;
    opt.micro_batches = 0;
  }
  opt.dp = 0;
  try {
    const parallel::ParallelPlan plan = resolve(opt, world);
    if (budget > 0) train::check_memory_fits(opt, world, budget, "the budget per rank");
    ElasticLayout l;
    l.world = world;
    l.dp = plan.dp.degree;
    l.micro_batch = plan.micro_batch;
    l.accumulation = plan.global_batch / (static_cast<int64_t>(plan.dp.degree) * plan.micro_batch);
    l.peak_bytes = train::worst_rank_peak(opt, world);
    l.flags = {"--dp", "0"};
    // --micro-batch and --micro-batches exclude each other: change the one the command gave.
    if (changed && given_micro_batches > 0)
      l.flags.insert(l.flags.end(), {"--micro-batches", std::to_string(l.accumulation)});
    else if (changed)
      l.flags.insert(l.flags.end(), {"--micro-batch", std::to_string(mb)});
    return l;
  } catch (const ConfigError& e) {
    if (why) *why += detail::concat("\n  ", world, " ranks: ", e.what());
    return std::nullopt;
  }
}

std::string join_hosts(const std::vector<Host>& hosts) {
  std::string s;
  for (const Host& h : hosts) s += (s.empty() ? "" : ", ") + h.name + " (" + std::to_string(h.slots) + ")";
  return s.empty() ? "none" : s;
}

// This host's available memory shared by the most ranks any remaining host
// runs (hosts assumed alike); --max-memory when given.
uint64_t memory_budget(const train::TrainOptions& opt, const std::vector<Host>& hosts, std::string* text) {
  if (opt.max_memory > 0) {
    *text = "--max-memory per rank";
    return opt.max_memory;
  }
  int most = 1;
  for (const Host& h : hosts) most = std::max(most, h.slots);
  const auto avail = host_memory_available();
  if (!avail) return 0;
  *text = detail::concat("this host's available memory shared by ", most, " ranks (hosts assumed alike)");
  return *avail / static_cast<uint64_t>(most);
}

std::string newest_committed(const std::string& dir) {
  const auto list = train::list_checkpoints(dir);
  return list.empty() ? "none yet (the job starts over at step 0)" : list.back().path;
}

// A private folder for the relaunches' hostfiles, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "braid-run.XXXXXX").string();
    BRAID_CHECK(mkdtemp(tmpl.data()) != nullptr, "braid run: cannot make a temporary folder in ",
                std::filesystem::temp_directory_path().string());
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

std::string ElasticLayout::describe() const {
  return detail::concat(world, " ranks (DP ", dp, "), micro-batch ", micro_batch, " x ", accumulation,
                        accumulation > 1 ? " accumulated" : "", ", planned peak ", peak_bytes >> 20, " MiB per rank");
}

std::optional<ElasticLayout> choose_layout(const train::TrainOptions& opt, int slots, uint64_t budget_bytes,
                                           std::string* why) {
  const int64_t cap = opt.micro_batch != parallel::kMicroBatchAuto ? opt.micro_batch : parallel::kMicroBatchAutoMax;
  for (int world = slots; world >= 1; --world)
    for (int64_t mb : micro_batch_candidates(opt, cap, opt.global_batch))
      if (auto l = try_layout(opt, world, mb, budget_bytes, mb == opt.micro_batch ? why : nullptr)) return l;
  return std::nullopt;
}

bool probe_host(const LaunchCommand& cmd, const std::string& host, double timeout_s) {
  std::vector<std::string> argv = cmd.launcher;
  argv.insert(argv.end(), {"--host", host, "-np", "1", "true"});
  JobOptions o;
  o.echo = false;
  o.timeout_s = timeout_s;
  o.abort_grace_s = 0;
  return run_job(argv, o).exit_code == 0;
}

namespace {

using Clock = std::chrono::steady_clock;

void write_hostfile(const std::string& path, const std::vector<Host>& hosts) {
  const std::string text = hostfile_text(hosts);
  AtomicFile f(path, "hostfile");
  f.writer().write(text.data(), text.size());
  f.commit();
}

// Logs where relaunch `restart` resumed and what it lost, once its start line appears.
std::function<void(const std::string&)> resume_logger(int restart, int64_t reached, Clock::time_point failed_at) {
  return [=](const std::string& line) {
    JobReport r;
    scan_line(line, r, 0);
    if (restart == 0 || r.resumed_step < 0) return;
    const double took = std::chrono::duration<double>(Clock::now() - failed_at).count();
    const std::string lost = reached < 0 ? std::string("unknown (--quiet hid the failed launch's progress lines)")
                                         : detail::concat(std::max<int64_t>(0, reached - r.resumed_step),
                                                          " (the failed launch had reached step ", reached, ")");
    char took_s[32];
    std::snprintf(took_s, sizeof took_s, "%.1f s", took);
    log(detail::concat("restart ", restart, ": resumed at step ", r.resumed_step, ", ", took_s, " after the failure was reported (probe, relaunch, load); steps lost: ", lost));
  };
}

// After launch `restart` failed with a rank failure: the next launch (hosts
// that answer, the layout for them), or the exit code to stop with.
struct NextLaunch {
  int stop_code = -1;  // >= 0: stop with this code
  std::vector<Host> hosts;
  std::optional<ElasticLayout> layout;
};
NextLaunch next_launch(const LaunchCommand& cmd, const train::TrainOptions& opt, const ElasticOptions& eo,
                       const JobReport& r, const std::vector<Host>& hosts, int restart) {
  std::string cause = r.failed ? r.failure : detail::concat("exit code ", r.exit_code);
  if (const std::string host = lost_host(r.failure); !host.empty())
    cause += detail::concat(" (ranks ", ranks_on(hosts, restart == 0 ? cmd.np : 0, host), " ran there)");
  if (restart >= eo.max_restarts) {
    log(detail::concat("stopping: the job failed again (", cause, ") and --max-restarts ", eo.max_restarts,
                       " are used"));
    return {r.exit_code, {}, {}};
  }
  std::vector<Host> alive, lost;
  for (const Host& h : hosts) (probe_host(cmd, h.name, eo.probe_timeout_s) ? alive : lost).push_back(h);
  if (static_cast<int>(alive.size()) < eo.min_nodes) {
    log(detail::concat("stopping: ", alive.size(), " hosts answer (lost: ", join_hosts(lost),
                       "), fewer than --min-nodes ", eo.min_nodes));
    return {r.exit_code, {}, {}};
  }
  int slots = 0;
  for (const Host& h : alive) slots += h.slots;
  std::string budget_text, why;
  const uint64_t budget = memory_budget(opt, alive, &budget_text);
  auto layout = choose_layout(opt, slots, budget, &why);
  if (!layout) {
    log(detail::concat("giving up: no layout of this job runs on the ", slots, " slots of the hosts that answer (",
                       join_hosts(alive), ") within ", budget_text, ":", why));
    return {static_cast<int>(ExitCode::config), {}, {}};
  }
  log(detail::concat("restart ", restart + 1, " of at most ", eo.max_restarts, ": cause: ", cause,
                     "; hosts lost: ", join_hosts(lost), "; new layout: ", layout->describe(), " on ",
                     join_hosts(alive), "; resuming from the newest checkpoint that verifies (newest committed: ",
                     newest_committed(opt.save_dir), ")"));
  return {-1, alive, layout};
}

}  // namespace

int run_elastic(const LaunchCommand& cmd, const train::TrainOptions& opt, const ElasticOptions& eo) {
  BRAID_CONFIG_CHECK(!cmd.hosts.empty(), "braid run --elastic needs the job's hosts in the command (mpirun "
                                         "--hostfile FILE or --host a,b,...) to find which are gone");
  BRAID_CONFIG_CHECK(!opt.save_dir.empty(), "braid run --elastic restarts from checkpoints: give braid train "
                                            "--save DIR (and --save-every K so a restart loses at most K steps)");
  BRAID_CONFIG_CHECK(static_cast<int>(cmd.hosts.size()) >= eo.min_nodes, "braid run: --min-nodes ", eo.min_nodes,
                     " but the command names ", cmd.hosts.size(), " hosts");
  TempDir tmp;
  std::vector<Host> hosts = cmd.hosts;
  int np = cmd.np > 0 ? cmd.np : cmd.slots();
  std::vector<std::string> argv = cmd.given;  // the first launch is the command as given
  int64_t reached = -1;                        // the last step the failed launch reached
  Clock::time_point failed_at;
  for (int restart = 0;; ++restart) {
    log(detail::concat("launch ", restart + 1, ": ", np, " ranks on ", hosts.size(), " hosts: ", join_hosts(hosts)));
    JobOptions jo = eo.job;
    jo.on_line = resume_logger(restart, reached, failed_at);
    const JobReport r = run_job(argv, jo);
    failed_at = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, r.ended_s - r.failure_at_s)));
    if (r.last_step >= 0) reached = r.last_step;
    if (r.exit_code == 0) {
      log(detail::concat("the job finished after ", restart, " restart", restart == 1 ? "" : "s"));
      return 0;
    }
    if (r.exit_code != static_cast<int>(ExitCode::rank_failure) || stop_signals_received() > 0) {
      log(detail::concat("the job ended with exit code ", r.exit_code,
                         stop_signals_received() > 0 ? " after a stop signal" : " (not a rank failure)",
                         ": not restarting"));
      return r.exit_code;
    }
    const NextLaunch next = next_launch(cmd, opt, eo, r, hosts, restart);
    if (next.stop_code >= 0) return next.stop_code;
    hosts = next.hosts;
    np = next.layout->world;
    const std::string hostfile = tmp.path + "/hostfile." + std::to_string(restart + 1);
    write_hostfile(hostfile, hosts);
    std::vector<std::string> extra = next.layout->flags;
    extra.insert(extra.end(), {"--resume", "auto"});
    argv = launch_argv(cmd, hostfile, np, extra);
  }
}

}  // namespace braid::launch
