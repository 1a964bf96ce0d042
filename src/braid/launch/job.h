// One run of a launch command under watch: its output passed through and read
// line by line for the launcher's and braid's reports of a failed rank or a lost
// host. Once one appears the launcher has a grace period to end the job; then
// its whole process group is killed, because an MPI launcher whose abort cannot
// reach a host (a cut link, a dead machine) can wait forever.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "braid/launch/launch_command.h"

namespace braid::launch {

struct JobOptions {
  double abort_grace_s = 3;   // seconds the launcher has to end the job after the first failure report
  double timeout_s = 0;       // the job is killed after this many seconds (0: no limit)
  bool echo = true;           // pass the job's stdout and stderr through
  bool forward_signals = true;  // pass stop signals on to the launcher (install_forwarding_handlers)
  std::vector<std::pair<std::string, std::string>> env;  // set in the launcher's environment (unless already set)
  std::function<void(const std::string&)> on_line;       // every complete output line (stdout and stderr)
};

/// What a job did, as its output and exit showed.
struct JobReport {
  int exit_code = 0;         // the launcher's, or the failure's code when it had to be killed (4 if none given)
  bool failed = false;       // a failure report was seen
  std::string failure;       // the first failure report (one line)
  bool killed = false;       // the launcher outlived the grace and was killed
  bool timed_out = false;    // killed at JobOptions::timeout_s
  double failure_at_s = -1;  // seconds from the start to the first failure report
  double ended_s = 0;        // seconds from the start to the launcher's end
  int64_t last_step = -1;    // the last training step reported ("step N/...")
  int64_t resumed_step = -1; // braid train's "resumed from X at step S"
};

/// Reads one output line: updates the report's failure and step fields.
/// (Separate so the patterns are tested without processes.)
void scan_line(const std::string& line, JobReport& r, double now_s);

/// The host a launcher's report says it lost ("... on node H"), "" if none.
std::string lost_host(const std::string& failure);

/// The ranks placed by slot on `host` among `np` ranks (0: every slot), as
/// "2 3"; "" when none.
std::string ranks_on(const std::vector<Host>& hosts, int np, const std::string& host);

/// Whether a failure report is the launcher's news of a rank or host it lost
/// (a killed rank, a lost daemon), not a rank's own error or abort.
bool lost_by_launcher(const std::string& failure);

/// The code a failure report carries ("errorcode N" of MPI_ABORT), or 4 (a rank failure).
int failure_exit_code(const std::string& failure);

/// Runs ARGV (argv[0] looked up in PATH) in a process group of its own, watched
/// as above. SIGINT, SIGTERM, SIGUSR1 and SIGHUP sent to this process while it runs are
/// forwarded to the launcher (see install_forwarding_handlers). Throws Error
/// when the process cannot be started.
JobReport run_job(const std::vector<std::string>& argv, const JobOptions& opt);

/// Installs the forwarding handlers of run_job (once per process) and ignores
/// SIGPIPE. The first SIGINT, SIGTERM, SIGUSR1 or SIGHUP is forwarded as SIGUSR1 (mpirun passes it to
/// every rank; braid train stops at the next step boundary and saves), a
/// later one as itself.
void install_forwarding_handlers();

/// Stop signals received since install_forwarding_handlers (a stopped job is
/// not restarted).
int stop_signals_received();

}  // namespace braid::launch
