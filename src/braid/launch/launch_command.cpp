#include "braid/launch/launch_command.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "braid/core/error.h"

namespace braid::launch {

namespace {

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

const std::initializer_list<const char*> kHostfileFlags = {"--hostfile", "-hostfile", "--machinefile", "-machinefile"};
const std::initializer_list<const char*> kHostFlags = {"--host", "-host", "-H"};
const std::initializer_list<const char*> kNpFlags = {"-np", "--np", "-n", "--n", "-c"};

// Adds `slots` to host `name`, keeping first-seen order.
void add_slots(std::vector<Host>& hosts, const std::string& name, int slots) {
  for (Host& h : hosts)
    if (h.name == name) {
      h.slots += slots;
      return;
    }
  hosts.push_back({name, slots});
}

int parse_count(const std::string& v, const std::string& what) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  BRAID_CONFIG_CHECK(used == v.size() && n >= 1, what, " '", v, "' is not a count >= 1");
  return n;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  BRAID_CONFIG_CHECK(in.good(), "braid run: cannot read the hostfile ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "--opt=value" -> ("--opt", "value"); other words unchanged with no value.
std::pair<std::string, std::string> split_eq(const std::string& w) {
  const size_t eq = w.find('=');
  if (w.rfind("-", 0) != 0 || eq == std::string::npos) return {w, ""};
  return {w.substr(0, eq), w.substr(eq + 1)};
}

size_t find_braid_train(const std::vector<std::string>& argv) {
  for (size_t i = 1; i + 1 < argv.size(); ++i)
    if (std::filesystem::path(argv[i]).filename().string().rfind("braid", 0) == 0 && argv[i + 1] == "train") return i;
  return 0;
}

// Where the program starts: at a wrapper the launcher runs braid through (the
// first such word among the launcher's), else at the braid binary.
size_t program_start(const std::vector<std::string>& argv, size_t braid_at) {
  static const std::initializer_list<const char*> wrappers = {"env", "numactl", "taskset", "nice", "chrt",
                                                              "stdbuf", "time", "nsys"};
  for (size_t i = 1; i < braid_at; ++i)
    if (one_of(std::filesystem::path(argv[i]).filename().string(), wrappers)) return i;
  return braid_at;
}

}  // namespace

int LaunchCommand::slots() const {
  int n = 0;
  for (const Host& h : hosts) n += h.slots;
  return n;
}

std::vector<std::string> LaunchCommand::train_args() const {
  const size_t first = train_at + 2;  // after "braid train"
  return program.size() > first ? std::vector<std::string>(program.begin() + static_cast<std::ptrdiff_t>(first),
                                                           program.end())
                                : std::vector<std::string>{};
}

std::vector<Host> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, w;
    if (!(words >> name)) continue;
    int slots = 1;
    bool given = false;
    while (words >> w) {
      const size_t eq = w.find('=');
      const std::string key = w.substr(0, eq), value = eq == std::string::npos ? "" : w.substr(eq + 1);
      if (key == "slots") {
        slots = parse_count(value, detail::concat(path, ":", no, ": slots"));
        given = true;
      } else BRAID_CONFIG_CHECK(key == "max_slots" || key == "max-slots", path, ":", no, ": unknown field '", w,
                              "' (a hostfile line is NAME [slots=N] [max_slots=M])");
    }
    add_slots(hosts, name, slots);
    for (Host& h : hosts)
      if (h.name == name) h.slots_given = h.slots_given && given;
  }
  BRAID_CONFIG_CHECK(!hosts.empty(), "braid run: the hostfile ", path, " names no host");
  return hosts;
}

std::vector<Host> parse_host_list(const std::string& list) {
  std::vector<Host> hosts;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const int slots = colon == std::string::npos ? 1 : parse_count(item.substr(colon + 1), "--host " + item + ": slots");
    add_slots(hosts, item.substr(0, colon), slots);
  }
  BRAID_CONFIG_CHECK(!hosts.empty(), "braid run: --host '", list, "' names no host");
  return hosts;
}

LaunchCommand parse_launch_command(const std::vector<std::string>& argv) {
  BRAID_CONFIG_CHECK(!argv.empty(), "braid run: no command after --; give one: braid run -- mpirun -np 4 braid train ...");
  const std::string launcher = std::filesystem::path(argv[0]).filename().string();
  BRAID_CONFIG_CHECK(one_of(launcher, {"mpirun", "mpiexec", "orterun"}), "braid run: the command starts with '",
                     argv[0], "'; it must be an MPI launcher (mpirun, mpiexec or orterun) then braid train");
  const size_t at = find_braid_train(argv);
  BRAID_CONFIG_CHECK(at > 0, "braid run: found no 'braid train' in the command; give mpirun [options] "
                             "PATH/braid train [options]");
  const size_t start = program_start(argv, at);
  LaunchCommand cmd;
  cmd.given = argv;
  cmd.launcher.push_back(argv[0]);
  for (size_t i = 1; i < start; ++i) {
    auto [key, value] = split_eq(argv[i]);
    const bool known = one_of(key, kHostfileFlags) || one_of(key, kHostFlags) || one_of(key, kNpFlags);
    if (!known) {
      cmd.launcher.push_back(argv[i]);
      continue;
    }
    if (value.empty()) {
      BRAID_CONFIG_CHECK(i + 1 < start, "braid run: ", key, " needs a value");
      value = argv[++i];
    }
    if (one_of(key, kNpFlags)) {
      cmd.np = parse_count(value, key);
    } else if (one_of(key, kHostfileFlags)) {
      cmd.hostfile = value;
      cmd.hosts = parse_hostfile(read_text(value), value);
    } else {
      cmd.hosts = parse_host_list(value);
    }
  }
  cmd.program.assign(argv.begin() + static_cast<std::ptrdiff_t>(start), argv.end());
  cmd.train_at = at - start;
  return cmd;
}

std::vector<std::string> launch_argv(const LaunchCommand& cmd, const std::string& hostfile, int np,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> out = cmd.launcher;
  if (!hostfile.empty()) out.insert(out.end(), {"--hostfile", hostfile});
  if (np > 0) out.insert(out.end(), {"-np", std::to_string(np)});
  out.insert(out.end(), cmd.program.begin(), cmd.program.end());
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

std::string hostfile_text(const std::vector<Host>& hosts) {
  std::string s;
  for (const Host& h : hosts) s += detail::concat(h.name, " slots=", h.slots, " max_slots=", h.slots, "\n");
  return s;
}

std::vector<int> ranks_per_host(const std::vector<Host>& hosts, int np) {
  std::vector<int> n(hosts.size(), 0);
  int total = 0;
  for (const Host& h : hosts) total += h.slots;
  int left = np > 0 ? np : total;
  while (left > 0 && total > 0)
    for (size_t i = 0; i < hosts.size() && left > 0; ++i) {
      const int take = std::min(left, hosts[i].slots);
      n[i] += take;
      left -= take;
    }
  return n;
}

int host_of_rank(const std::vector<Host>& hosts, int np, int rank) {
  // Filling by slot, pass after pass: rank r is the r-th placed.
  int total = 0;
  for (const Host& h : hosts) total += h.slots;
  const int n = np > 0 ? np : total;
  if (rank < 0 || rank >= n || total == 0) return -1;
  int placed = 0;
  while (true)
    for (size_t i = 0; i < hosts.size(); ++i) {
      const int take = std::min(n - placed, hosts[i].slots);
      if (rank < placed + take) return static_cast<int>(i);
      placed += take;
    }
}

}  // namespace braid::launch
