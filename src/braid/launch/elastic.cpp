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
  const bool given_dp = opt.dp != 0;
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
    if (given_dp) l.flags = {"--dp", "0"};  // derived from the new world size
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

// "a (2), b (1)": hosts and the ranks on each (their slots when np is 0).
std::string join_hosts(const std::vector<Host>& hosts, int np = 0) {
  const std::vector<int> n = ranks_per_host(hosts, np);
  std::string s;
  for (size_t i = 0; i < hosts.size(); ++i)
    s += (s.empty() ? "" : ", ") + hosts[i].name + " (" + std::to_string(np > 0 ? n[i] : hosts[i].slots) + ")";
  return s.empty() ? "none" : s;
}

// The hosts of the first launch, each with the ranks it ran as its slots: what
// a relaunch may use again (never more ranks than the command's -np, and the
// launcher's oversubscription, if any, as it was).
std::vector<Host> placed_hosts(const LaunchCommand& cmd, int np) {
  for (const Host& h : cmd.hosts)
    BRAID_CONFIG_CHECK(h.slots_given, "braid run --elastic: the hostfile line of ", h.name,
                       " has no slots=; mpirun would count that host's cores, which braid run cannot see: write \"",
                       h.name, " slots=N\"");
  const std::vector<int> n = ranks_per_host(cmd.hosts, np);
  std::vector<Host> out;
  for (size_t i = 0; i < cmd.hosts.size(); ++i)
    if (n[i] > 0) out.push_back({cmd.hosts[i].name, n[i], true});
  return out;
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
  for (int world = slots; world >= 1; --world) {
    // The largest micro-batch that runs; under PP, the largest that still
    // gives every stage a micro-batch to work on (m >= P) when one does.
    std::optional<ElasticLayout> first;
    for (int64_t mb : micro_batch_candidates(opt, cap, opt.global_batch)) {
      auto l = try_layout(opt, world, mb, budget_bytes, mb == opt.micro_batch ? why : nullptr);
      if (!l) continue;
      if (opt.pp <= 1 || l->accumulation >= opt.pp) return l;
      if (!first) first = l;
    }
    if (first) return first;
  }
  return std::nullopt;
}

bool probe_host(const LaunchCommand& cmd, const std::string& host, double timeout_s) {
  std::vector<std::string> argv = cmd.launcher;
  argv.insert(argv.end(), {"--host", host, "-np", "1", "true"});
  JobOptions o;
  o.echo = false;
  o.forward_signals = false;  // a stop signal is for the job: the caller checks it after the probes
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
                       const JobReport& r, const std::vector<Host>& hosts, int np, int restart) {
  std::string cause = r.failed ? r.failure : detail::concat("exit code ", r.exit_code);
  if (const std::string host = lost_host(r.failure); !host.empty())
    cause += detail::concat(" (ranks ", ranks_on(hosts, np, host), " ran there)");
  if (restart >= eo.max_restarts) {
    log(detail::concat("stopping: the job failed again (", cause, ") and --max-restarts ", eo.max_restarts,
                       " are used"));
    return {r.exit_code, {}, {}};
  }
  std::vector<Host> alive, lost;
  for (const Host& h : hosts) {
    if (stop_signals_received() > 0) break;
    (probe_host(cmd, h.name, eo.probe_timeout_s) ? alive : lost).push_back(h);
  }
  if (stop_signals_received() > 0) {
    log("a stop signal arrived while the hosts were probed: not restarting");
    return {r.exit_code, {}, {}};
  }
  if (static_cast<int>(alive.size()) < eo.min_nodes) {
    log(detail::concat("stopping: ", alive.size(), " hosts answer (lost: ", join_hosts(lost),
                       "), fewer than --min-nodes ", eo.min_nodes));
    return {r.exit_code, {}, {}};
  }
  int slots = 0;
  for (const Host& h : alive) slots += h.slots;
  slots = std::min(slots, np);  // the ranks that remain, never more than ran
  std::string budget_text, why;
  const uint64_t budget = memory_budget(opt, alive, &budget_text);
  auto layout = choose_layout(opt, slots, budget, &why);
  if (!layout) {
    log(detail::concat("giving up: no layout of this job runs on the ", slots, " ranks that remain on the hosts that "
                       "answer (", join_hosts(alive), ") within ", budget_text, ":", why));
    return {static_cast<int>(ExitCode::config), {}, {}};
  }
  log(detail::concat("restart ", restart + 1, " of at most ", eo.max_restarts, ": cause: ", cause,
                     "; hosts lost: ", join_hosts(lost), "; new layout: ", layout->describe(), " on ",
                     join_hosts(alive, layout->world), "; resuming from the newest checkpoint that verifies (newest committed: ",
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
  std::optional<TempDir> tmp;  // the relaunches' hostfiles, made at the first
  int np = cmd.np > 0 ? cmd.np : cmd.slots();
  std::vector<Host> hosts = placed_hosts(cmd, np);
  std::vector<std::string> argv = cmd.given;  // the first launch is the command as given
  int64_t reached = -1;                        // the last step the failed launch reached
  Clock::time_point failed_at;
  for (int restart = 0;; ++restart) {
    log(detail::concat("launch ", restart + 1, ": ", np, " ranks on ", hosts.size(), " hosts: ", join_hosts(hosts, np)));
    JobOptions jo = eo.job;
    jo.on_line = resume_logger(restart, reached, failed_at);
    const JobReport r = run_job(argv, jo);
    failed_at = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::max(0.0, r.ended_s - r.failure_at_s)));
    if (r.last_step >= 0) reached = r.last_step;
    const bool stopped = stop_signals_received() > 0;
    if (r.exit_code == 0) {
      log(stopped ? std::string("the job stopped on a signal and saved; not restarting")
                  : detail::concat("the job finished after ", restart, " restart", restart == 1 ? "" : "s"));
      return 0;
    }
    if (r.exit_code != static_cast<int>(ExitCode::rank_failure) || stopped) {
      log(detail::concat("the job ended with exit code ", r.exit_code,
                         stopped ? " after a stop signal" : " (not a rank failure)", ": not restarting"));
      return r.exit_code;
    }
    const NextLaunch next = next_launch(cmd, opt, eo, r, hosts, np, restart);
    if (next.stop_code >= 0) return next.stop_code;
    hosts = next.hosts;
    np = next.layout->world;
    if (!tmp) tmp.emplace();
    const std::string hostfile = tmp->path + "/hostfile." + std::to_string(restart + 1);
    write_hostfile(hostfile, hosts);
    std::vector<std::string> extra = next.layout->flags;
    extra.insert(extra.end(), {"--resume", "auto"});
    argv = launch_argv(cmd, hostfile, np, extra);
  }
}

}  // namespace braid::launch
