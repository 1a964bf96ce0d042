#include <string>

#include "braid/comm/algorithms/selector.h"
#include "braid/core/error.h"
#include "braid/core/parse.h"

namespace braid::comm::algo {

namespace {

// Bytes of one all-reduce/all-gather/broadcast switch point, a count, or a 0/1 switch.
enum class Kind : uint8_t { bytes, count, toggle };

struct Var {
  const char* name;
  const char* old_name;  // the name it had before, refused with a pointer to the new one
  Kind kind;
  size_t RingOptions::*bytes;
  int RingOptions::*count;
  bool RingOptions::*toggle;
};

constexpr Var kVars[] = {
    {"BRAID_COMM_RING_CHUNK_BYTES", "BRAID_COMM_CHUNK_BYTES", Kind::bytes, &RingOptions::chunk_bytes, nullptr, nullptr},
    {"BRAID_COMM_RING_RECVS_AHEAD", "BRAID_COMM_DEPTH", Kind::count, nullptr, &RingOptions::depth, nullptr},
    {"BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES", "BRAID_COMM_AR_DOUBLING_MAX", Kind::bytes,
     &RingOptions::doubling_all_reduce_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_ALLREDUCE_DOUBLING_MAX_BYTES_2RANKS", "BRAID_COMM_AR_DOUBLING_MAX_2RANKS", Kind::bytes,
     &RingOptions::doubling_all_reduce_max_bytes_2ranks, nullptr, nullptr},
    {"BRAID_COMM_ALLREDUCE_HALVING_MAX_BYTES", "BRAID_COMM_AR_HALVING_MAX", Kind::bytes,
     &RingOptions::halving_all_reduce_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_ALLGATHER_DOUBLING_MAX_BYTES", "BRAID_COMM_AG_DOUBLING_MAX", Kind::bytes,
     &RingOptions::doubling_all_gather_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_ALLGATHER_DIRECT_MAX_BYTES", "BRAID_COMM_AG_DIRECT_MAX", Kind::bytes,
     &RingOptions::direct_all_gather_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_ALLTOALL_ONE_ROUND", "BRAID_COMM_A2A_DIRECT", Kind::toggle, nullptr, nullptr,
     &RingOptions::direct_all_to_all},
    {"BRAID_COMM_BROADCAST_TREE_MAX_BYTES", "BRAID_COMM_BCAST_TREE_MAX", Kind::bytes,
     &RingOptions::chain_broadcast_min_bytes, nullptr, nullptr},
    {"BRAID_COMM_BROADCAST_FLAT_MAX_BYTES", "BRAID_COMM_BCAST_FLAT_MAX", Kind::bytes,
     &RingOptions::flat_broadcast_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_BROADCAST_SCATTER_MAX_BYTES", "BRAID_COMM_BCAST_SCATTER_MAX", Kind::bytes,
     &RingOptions::scatter_broadcast_max_bytes, nullptr, nullptr},
    {"BRAID_COMM_HIERARCHICAL", "BRAID_COMM_HIER", Kind::toggle, nullptr, nullptr, &RingOptions::hierarchical},
};

void set(RingOptions& o, const Var& v, const std::string& text) {
  uint64_t x = 0;
  const bool ok = parse_count(text, x);
  switch (v.kind) {
    case Kind::bytes: {
      const bool chunk = v.bytes == &RingOptions::chunk_bytes;  // a ring cannot move 0-byte chunks
      BRAID_CONFIG_CHECK(ok && (x > 0 || !chunk), v.name, "='", text, "' is not a byte count",
                         chunk ? " >= 1" : "", "; give plain digits (e.g. 1048576) or unset it for the default");
      o.*v.bytes = static_cast<size_t>(x);
      break;
    }
    case Kind::count:
      BRAID_CONFIG_CHECK(ok && x >= 1 && x <= 64, v.name, "='", text,
                         "' is not a count in [1, 64]; unset it for the default (4)");
      o.*v.count = static_cast<int>(x);
      break;
    case Kind::toggle:
      BRAID_CONFIG_CHECK(ok && x <= 1, v.name, "='", text, "' must be 0 or 1");
      o.*v.toggle = x == 1;
      break;
  }
}

}  // namespace

void apply_env(RingOptions& opts, const std::function<const char*(const char*)>& getenv) {
  for (const Var& v : kVars) {
    BRAID_CONFIG_CHECK(getenv(v.old_name) == nullptr, v.old_name, " was renamed ", v.name,
                       "; set that instead (the old name would be ignored)");
    if (const char* s = getenv(v.name)) set(opts, v, s);
  }
}

void check_env_names(const std::vector<std::string>& set) {
  const std::string prefix = "BRAID_COMM_";
  for (const std::string& name : set) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    bool known = false;
    for (const Var& v : kVars) known = known || name == v.name || name == v.old_name;
    if (known) continue;
    std::string all;
    for (const Var& v : kVars) all += (all.empty() ? "" : ", ") + std::string(v.name);
    throw ConfigError(detail::concat(name, " is not a variable braid reads (a misspelling would be ignored); the ",
                                     prefix, "* variables are ", all));
  }
}

std::vector<std::string> env_names() {
  std::vector<std::string> out;
  for (const Var& v : kVars) out.emplace_back(v.name);
  return out;
}

}  // namespace braid::comm::algo
