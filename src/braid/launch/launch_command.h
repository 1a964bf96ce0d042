// A job's launch command as `braid run` receives it: an MPI launcher (mpirun,
// mpiexec) with its options, then the program it starts on every rank. The
// supervisor reads the hosts and the rank count out of it and writes them back
// for a relaunch on fewer hosts; every other launcher option passes through
// untouched, so the relaunch starts the way the user's command did.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace braid::launch {

/// One host of a job: its name or address as the launcher reaches it, and the
/// ranks (slots) it takes.
struct Host {
  std::string name;
  int slots = 1;
  bool slots_given = true;  // false: a hostfile line without slots= (the launcher counts the host's cores)
};

/// The launch command split into its parts.
struct LaunchCommand {
  std::vector<std::string> given;     // the whole command as given
  std::vector<std::string> launcher;  // "mpirun" and its options, without hosts and rank count
  std::vector<Host> hosts;            // from --hostfile or --host (empty: the launcher's default, this host)
  std::string hostfile;               // the --hostfile given, "" if none
  int np = 0;                         // -np / -n / --np / -c (0: not given: every slot)
  std::vector<std::string> program;   // the program and its arguments (a wrapper such as env or numactl first)
  size_t train_at = 0;                // index in `program` of the braid binary

  /// Slots over all hosts.
  int slots() const;
  /// The arguments after `braid train`.
  std::vector<std::string> train_args() const;
};

/// Reads an OpenMPI hostfile's text: "NAME [slots=N] [max_slots=M]" per line,
/// '#' comments; a name given twice adds its slots; a line without slots= is
/// one slot. Throws ConfigError naming the line for a malformed one.
std::vector<Host> parse_hostfile(const std::string& text, const std::string& path);

/// Reads --host's list: "a,b:2,c" (a name repeated adds a slot; ":N" N slots).
std::vector<Host> parse_host_list(const std::string& list);

/// Splits ARGV (the words after `braid run ... --`): ARGV[0] must be an MPI
/// launcher (mpirun, mpiexec, orterun, by base name) and the program the first
/// word naming a `braid` binary that is followed by `train`, or a wrapper the
/// launcher starts it through (env, numactl, taskset, nice, chrt, stdbuf,
/// time, nsys) just before; the hosts
/// (--hostfile / --machinefile / --host / -H, also in the --opt=value form)
/// and the rank count (-np / --np / -n / -c) are taken out of the launcher's
/// options. Throws ConfigError for another launcher, no `braid train`, or a
/// hostfile that cannot be read.
LaunchCommand parse_launch_command(const std::vector<std::string>& argv);

/// The command that launches `cmd.program` on `np` ranks over `hostfile`
/// (a file written by the caller; "" keeps the command's own hosts):
/// launcher options, --hostfile F, -np N, program with `extra` appended to it.
std::vector<std::string> launch_argv(const LaunchCommand& cmd, const std::string& hostfile, int np,
                                     const std::vector<std::string>& extra = {});

/// The hostfile text for `hosts` (one "NAME slots=N max_slots=N" line each).
std::string hostfile_text(const std::vector<Host>& hosts);

/// The ranks each host runs when `np` ranks (0: every slot) are placed by slot
/// (OpenMPI's default): hosts in order, each filled to its slots before the
/// next; ranks beyond the slots (--oversubscribe) go round again the same way.
std::vector<int> ranks_per_host(const std::vector<Host>& hosts, int np);

/// The host rank `rank` runs on under ranks_per_host(hosts, np); -1 past np.
int host_of_rank(const std::vector<Host>& hosts, int np, int rank);

}  // namespace braid::launch
