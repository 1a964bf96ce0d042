// `braid run`: starts a job's launch command (mpirun ... braid train ...) and
// watches it. A failed rank or a lost host ends the whole job within a grace
// period, with its reason, even where the launcher's own abort cannot reach a
// host; with --elastic the job is relaunched on the hosts that remain.
#include <cstdio>
#include <string>
#include <vector>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/launch/elastic.h"
#include "braid/launch/job.h"
#include "braid/launch/launch_command.h"

namespace braid::cli {

namespace {

struct RunArgs {
  bool elastic = false;
  launch::ElasticOptions eo;
  std::vector<std::string> command;
};

// OpenMPI's daemons notice a launcher (or a host) that went away through TCP
// keepalive on their control connections; the default takes 300 s + 9 x 20 s.
// Here: about 5 + 3 x 2 s, so a daemon cut off from mpirun ends its ranks and
// itself within 11 s (an idle connection sends one probe every 5 s).
std::vector<std::pair<std::string, std::string>> launcher_environment() {
  return {{"OMPI_MCA_oob_tcp_keepalive_time", "5"},
          {"OMPI_MCA_oob_tcp_keepalive_intvl", "2"},
          {"OMPI_MCA_oob_tcp_keepalive_probes", "3"}};
}

void log(const std::string& s) {
  std::fflush(stdout);
  std::fprintf(stderr, "braid run: %s\n", s.c_str());
  std::fflush(stderr);
}

// The ranks that ran on the host a failure report says was lost, as the
// command placed them ("" when the command does not say where ranks go).
std::string lost_ranks(const std::vector<std::string>& command, const std::string& failure) {
  const std::string host = launch::lost_host(failure);
  if (host.empty()) return "";
  try {
    const launch::LaunchCommand cmd = launch::parse_launch_command(command);
    const std::string ranks = launch::ranks_on(cmd.hosts, cmd.np, host);
    return ranks.empty() ? "" : detail::concat("host ", host, " was lost, and with it ranks ", ranks);
  } catch (const ConfigError&) {
    return "";
  }
}

int run_once(const RunArgs& a) {
  const launch::JobReport r = launch::run_job(a.command, a.eo.job);
  if (r.failed)
    log(detail::concat("the job failed (exit code ", r.exit_code, "), first reported ",
                       static_cast<int64_t>(r.failure_at_s * 10 + 0.5) / 10.0, " s after its start: ", r.failure));
  if (const std::string lost = lost_ranks(a.command, r.failure); !lost.empty()) log(lost);
  if (r.killed)
    log(detail::concat("the launcher had not ended ", a.eo.job.abort_grace_s,
                       " s after that report: killed it and everything it started here"));
  if (r.timed_out) log(detail::concat("the job was killed after its --timeout of ", a.eo.job.timeout_s, " s"));
  return r.exit_code;
}

int run_command(const RunArgs& a) {
  launch::install_forwarding_handlers();
  if (!a.elastic) return run_once(a);
  const launch::LaunchCommand cmd = launch::parse_launch_command(a.command);
  const train::TrainOptions opt = parse_train_options(cmd.train_args());
  return launch::run_elastic(cmd, opt, a.eo);
}

}  // namespace

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  a->eo.job.env = launcher_environment();
  CLI::App* c = app.add_subcommand(
      "run", "Run a launch command (braid run [options] -- mpirun ... braid train ...): a failed rank or lost host "
             "ends the whole job with its reason; --elastic relaunches it on the hosts that remain");
  const std::string g = "Elastic restart";
  c->add_flag("--elastic", a->elastic, "On a rank failure (exit code 4), relaunch on the hosts that still answer, "
                                       "with the largest layout that fits, from the newest checkpoint")->group(g);
  c->add_option("--min-nodes", a->eo.min_nodes, "Stop when fewer hosts than this answer")
      ->check(CLI::Range(1, 100000))->capture_default_str()->group(g);
  c->add_option("--max-restarts", a->eo.max_restarts, "Stop after this many restarts")
      ->check(CLI::Range(0, 1000))->capture_default_str()->group(g);
  c->add_option("--probe-timeout", a->eo.probe_timeout_s, "Seconds a host has to answer the liveness probe")
      ->check(CLI::Range(1.0, 3600.0))->capture_default_str()->group(g);
  const std::string w = "Watch";
  c->add_option("--abort-grace", a->eo.job.abort_grace_s,
                "Seconds the launcher has to end the job after a failure is reported; then it is killed")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str()->group(w);
  c->add_option("--timeout", a->eo.job.timeout_s, "Kill each launch after this many seconds (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str()->group(w);
  c->add_option("command", a->command, "The launch command, after --: mpirun [options] braid train [options]")
      ->required();
  c->callback([a, c] {
    BRAID_CONFIG_CHECK(a->elastic || (c->count("--min-nodes") == 0 && c->count("--max-restarts") == 0 &&
                                      c->count("--probe-timeout") == 0),
                       "--min-nodes, --max-restarts and --probe-timeout apply to --elastic; add --elastic");
    const int rc = run_command(*a);
    if (rc != 0) throw ExitWith{rc};
  });
}

}  // namespace braid::cli
