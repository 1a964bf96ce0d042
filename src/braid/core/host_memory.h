// The memory this process may use: the host's available memory, or less
// under a cgroup limit (v2 memory.max, v1 memory.limit_in_bytes).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace braid {

/// Where host_memory_available reads from (tests point it at files of their own).
struct HostMemorySources {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

/// Bytes this process can still allocate: MemAvailable of meminfo, capped by
/// its cgroup's limit minus its usage where one is set. nullopt when meminfo
/// cannot be read (then nothing is checked).
std::optional<uint64_t> host_memory_available(const HostMemorySources& src = {});

/// Measures how much this process's resident memory rises over a span of
/// work (Linux: /proc/self/status's VmRSS and VmHWM, the peak reset through
/// /proc/self/clear_refs at construction). peak_rise() is 0 where /proc
/// cannot be read or written. Resets the process's peak RSS.
class RssRise {
 public:
  RssRise();
  /// Bytes the peak resident set rose above the resident set at construction.
  uint64_t peak_rise() const;

 private:
  uint64_t start_ = 0;
  bool ok_ = false;
};

/// Parses a size: a count of bytes with an optional unit K, M, G, T (powers of
/// 1024, with or without "iB"/"B") or KB, MB, GB, TB (powers of 1000), e.g.
/// "512MiB", "1.5G", "2000000". Throws ConfigError naming `flag` and the forms.
uint64_t parse_size(const std::string& s, const std::string& flag);

}  // namespace braid
