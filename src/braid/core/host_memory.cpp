#include "braid/core/host_memory.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "braid/core/error.h"

namespace braid {

namespace {

// The first number of file `path`, or nullopt ("max", missing, unreadable).
std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream f(path);
  uint64_t v = 0;
  if (!(f >> v)) return std::nullopt;
  return v;
}

// A "Key:  N kB" field of a /proc status file, in bytes.
std::optional<uint64_t> status_field(const std::string& path, const std::string& want) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(want, 0) != 0) continue;
    std::istringstream in(line.substr(want.size()));
    uint64_t kib = 0;
    if (in >> kib) return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> meminfo_available(const std::string& path) {
  std::ifstream f(path);
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::nullopt;
}

// limit - usage of this process's cgroup (v2 "0::/path", or v1's memory line), if limited.
std::optional<uint64_t> cgroup_headroom(const HostMemorySources& src) {
  std::ifstream f(src.self_cgroup);
  std::string line;
  std::optional<uint64_t> out;
  auto take = [&](const std::string& limit, const std::string& usage) {
    const auto l = read_number(limit), u = read_number(usage);
    // v1 reports "no limit" as a huge number (2^63 rounded to pages).
    if (!l || *l >= (uint64_t{1} << 60)) return;
    const uint64_t room = *l > u.value_or(0) ? *l - u.value_or(0) : 0;
    out = out ? std::min(*out, room) : room;
  };
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty())
      take(src.cgroup_root + path + "/memory.max", src.cgroup_root + path + "/memory.current");
    else if (controllers == "memory")
      take(src.cgroup_root + "/memory" + path + "/memory.limit_in_bytes",
           src.cgroup_root + "/memory" + path + "/memory.usage_in_bytes");
  }
  return out;
}

}  // namespace

std::optional<uint64_t> host_memory_available(const HostMemorySources& src) {
  auto avail = meminfo_available(src.meminfo);
  if (!avail) return std::nullopt;
  if (auto room = cgroup_headroom(src)) avail = std::min(*avail, *room);
  return avail;
}

uint64_t parse_size(const std::string& s, const std::string& flag) {
  std::istringstream in(s);
  double v = -1;
  std::string unit;
  in >> v;
  const bool number = !in.fail() && v >= 0 && std::isfinite(v);
  std::getline(in, unit);
  const std::string u = unit;
  double scale = 0;
  const std::string bin[] = {"", "K", "M", "G", "T"}, dec[] = {"", "KB", "MB", "GB", "TB"};
  for (int i = 0; i < 5 && scale == 0; ++i) {
    const double p2 = std::pow(1024.0, i), p10 = std::pow(1000.0, i);
    if (u == bin[i] || (i > 0 && (u == bin[i] + "iB" || u == bin[i] + "i"))) scale = p2;
    else if (i > 0 && u == dec[i]) scale = p10;
    else if (i == 0 && u == "B") scale = 1;
  }
  BRAID_CONFIG_CHECK(number && scale > 0 && v * scale < 1.8e19, flag, " '", s,
                     "' is not a size; use bytes or a unit, e.g. 512MiB, 1.5G, 8GB");
  return static_cast<uint64_t>(v * scale);
}

RssRise::RssRise() {
  std::ofstream reset("/proc/self/clear_refs");
  reset << "5";  // resets VmHWM to the current RSS
  reset.flush();
  const auto rss = status_field("/proc/self/status", "VmRSS:");
  ok_ = reset.good() && rss.has_value();
  start_ = rss.value_or(0);
}

uint64_t RssRise::peak_rise() const {
  if (!ok_) return 0;
  const auto hwm = status_field("/proc/self/status", "VmHWM:");
  return hwm && *hwm > start_ ? *hwm - start_ : 0;
}

}  // namespace braid
