#include "braid/launch/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "braid/core/error.h"
#include "braid/launch/launch_command.h"

namespace braid::launch {

namespace {

// The launcher's reports of a failed rank or a lost host (OpenMPI's wording),
// and braid's own error line, which a rank prints before aborting the job.
const std::regex& failure_re() {
  static const std::regex re(
      "braid: error: rank [0-9]+:|process rank [0-9]+ with PID [0-9]+ on node [^ ]+ exited on signal|"
      "lost communication with a remote daemon|ORTE has lost|daemon .*(failed|died)|unexpectedly failed|"
      "MPI_ABORT was invoked on rank|returned a non-zero exit code|exited with a non-zero");
  return re;
}

// A signal received while a job runs, forwarded to its launcher by the watch
// loop, and how many came: mpirun turns SIGTERM and SIGINT into a kill of the
// job but passes SIGUSR1 to every rank, so the first stop signal goes on as
// SIGUSR1 (braid train stops at the step boundary and saves) and a second one
// as itself (the kill a second Ctrl-C means).
std::atomic<int> g_forward{0};
std::atomic<int> g_stops{0};
void on_signal(int sig) {
  g_forward.store(g_stops.fetch_add(1) == 0 ? SIGUSR1 : sig);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const JobOptions& opt, int out, int err) {
  setpgid(0, 0);
  sigset_t none;  // braid blocks the stop signals in its threads (preemption.h); the launcher must not inherit that
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (const auto& [k, v] : opt.env) setenv(k.c_str(), v.c_str(), /*overwrite=*/0);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "braid run: cannot start %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

// One output stream of the job: bytes passed through as they come, lines scanned.
struct Stream {
  int fd;
  FILE* echo_to;
  std::string pending;
};

void drain(Stream& s, const JobOptions& opt, JobReport& r, double now) {
  char buf[65536];
  const ssize_t n = read(s.fd, buf, sizeof buf);
  if (n <= 0) {
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(s.fd);
      s.fd = -1;
    }
    return;
  }
  if (opt.echo) {
    std::fwrite(buf, 1, static_cast<size_t>(n), s.echo_to);
    std::fflush(s.echo_to);
  }
  s.pending.append(buf, static_cast<size_t>(n));
  for (size_t nl; (nl = s.pending.find('\n')) != std::string::npos;) {
    const std::string line = s.pending.substr(0, nl);
    s.pending.erase(0, nl + 1);
    scan_line(line, r, now);
    if (opt.on_line) opt.on_line(line);
  }
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(' ');
  return a == std::string::npos ? std::string() : s.substr(a);
}

}  // namespace

void scan_line(const std::string& line, JobReport& r, double now_s) {
  static const std::regex step_re("^step +([0-9]+)/");
  static const std::regex resumed_re("^resumed from .* at step ([0-9]+)");
  std::smatch m;
  if (std::regex_search(line, m, step_re)) r.last_step = std::stoll(m[1]);
  if (std::regex_search(line, m, resumed_re)) r.resumed_step = std::stoll(m[1]);
  if (!r.failed && std::regex_search(line, failure_re())) {
    r.failed = true;
    r.failure = line;
    r.failure_at_s = now_s;
  }
  // The reports go on over lines: MPI_ABORT's code, the lost daemon's host.
  const auto follow = [&](const char* head, const char* next) {
    if (r.failed && r.failure.find(head) != std::string::npos && r.failure.find(next) == std::string::npos &&
        line.find(next) != std::string::npos)
      r.failure += " " + trimmed(line);
  };
  follow("MPI_ABORT was invoked", "errorcode");
  follow("lost communication with a remote daemon", "Remote daemon");
}

std::string lost_host(const std::string& failure) {
  static const std::regex re("(Remote daemon|daemon).* on node ([^ ]+)");
  std::smatch m;
  if (failure.find("MPI_ABORT") == std::string::npos && std::regex_search(failure, m, re)) return m[2];
  return "";
}

std::string ranks_on(const std::vector<Host>& hosts, int np, const std::string& host) {
  int n = np;
  if (n <= 0)
    for (const Host& h : hosts) n += h.slots;
  std::string out;
  for (int r = 0; r < n; ++r) {
    const int h = host_of_rank(hosts, np, r);
    if (h < 0 || hosts[static_cast<size_t>(h)].name != host) continue;
    if (!out.empty()) out += ' ';
    out += std::to_string(r);
  }
  return out;
}

bool lost_by_launcher(const std::string& failure) {
  return failure.find("braid: error:") == std::string::npos && failure.find("MPI_ABORT") == std::string::npos;
}

int failure_exit_code(const std::string& failure) {
  static const std::regex code_re("errorcode ([0-9]+)");
  std::smatch m;
  if (std::regex_search(failure, m, code_re)) return std::atoi(m[1].str().c_str());
  return static_cast<int>(ExitCode::rank_failure);
}

int stop_signals_received() { return g_stops.load(); }

void install_forwarding_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed terminal or pipe must not orphan the job
}

JobReport run_job(const std::vector<std::string>& argv, const JobOptions& opt) {
  BRAID_CHECK(!argv.empty(), "run_job: empty command");
  int out[2], err[2];
  BRAID_CHECK(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "braid run: pipe: ", std::strerror(errno));
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  BRAID_CHECK(pid >= 0, "braid run: fork: ", std::strerror(errno));
  if (pid == 0) exec_child(argv, opt, out[1], err[1]);
  setpgid(pid, pid);  // also here, so the group exists before any kill below
  close(out[1]);
  close(err[1]);
  Stream streams[2] = {{out[0], stdout, {}}, {err[0], stderr, {}}};
  JobReport r;
  int status = 0;
  bool exited = false;
  while (!exited || streams[0].fd >= 0 || streams[1].fd >= 0) {
    pollfd fds[2];
    nfds_t n = 0;
    for (Stream& s : streams)
      if (s.fd >= 0) fds[n++] = {s.fd, POLLIN, 0};
    if (n > 0) poll(fds, n, 100);
    else usleep(100000);
    for (Stream& s : streams)
      for (nfds_t i = 0; i < n; ++i)
        if (s.fd >= 0 && fds[i].fd == s.fd && fds[i].revents) drain(s, opt, r, seconds_since(t0));
    if (opt.forward_signals)
      if (const int sig = g_forward.exchange(0); sig != 0 && !exited) kill(pid, sig);
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      r.ended_s = seconds_since(t0);
      kill(-pid, SIGKILL);  // what the launcher left in its group (rsh/ssh agents) goes with it
    }
    const double now = seconds_since(t0);
    if (exited && now - r.ended_s > 2.0)  // a process outside the group still holds a pipe: stop reading
      for (Stream& s : streams)
        if (s.fd >= 0) close(s.fd), s.fd = -1;
    const bool late = r.failed && now - r.failure_at_s >= opt.abort_grace_s;
    const bool over = opt.timeout_s > 0 && now >= opt.timeout_s;
    if (!exited && (late || over)) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      exited = true;
      r.killed = late;
      r.timed_out = over && !late;
      r.ended_s = now;
      // The pipes may be held open by a process that left the group: stop reading.
      for (Stream& s : streams)
        if (s.fd >= 0) close(s.fd), s.fd = -1;
    }
  }
  if (r.killed) r.exit_code = failure_exit_code(r.failure);
  else if (r.timed_out) r.exit_code = 124;
  else if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else r.exit_code = 128 + WTERMSIG(status);
  // A rank or host the launcher lost is a rank failure whatever code the
  // launcher exits with (OpenMPI: 205 for a lost daemon); a rank's own abort
  // keeps its code (2 for a refused flag, 3 for damaged data).
  if (r.failed && (r.exit_code == 0 || lost_by_launcher(r.failure))) r.exit_code = failure_exit_code(r.failure);
  return r;
}

}  // namespace braid::launch
