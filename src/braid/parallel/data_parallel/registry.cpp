#include "braid/parallel/data_parallel/registry.h"

#include "braid/core/error.h"

namespace braid::parallel {

// Defined beside the GradSync class each builds.
extern const DataParallelMode kParameterServerMode, kHsdpMode, kFsdpMode, kZero3Mode, kZero2Mode, kZero1Mode;

const std::vector<const DataParallelMode*>& data_parallel_modes() {
  // Resolution order: a server first (--dp-mode ps), HSDP before FSDP (both --fsdp),
  // the ZeRO stages by --zero, plain DDP last.
  static const std::vector<const DataParallelMode*> modes = {
      &kParameterServerMode, &kHsdpMode, &kFsdpMode, &kZero3Mode, &kZero2Mode, &kZero1Mode, &kDdpMode,
  };
  return modes;
}

const char* holding_name(Holding h) {
  switch (h) {
    case Holding::replica: return "replica";
    case Holding::shard: return "shard";
    case Holding::server: return "server";
  }
  return "?";
}

const DataParallelMode& resolve_data_parallel_mode(const DataParallelFlags& f) {
  for (const DataParallelMode* m : data_parallel_modes()) {
    if (!m->selected(f)) continue;
    m->validate(f);
    return *m;
  }
  throw ConfigError(detail::concat("no data-parallel mode takes --dp-mode ", f.dp_mode, " --zero ", f.zero,
                                   f.fsdp ? " --fsdp" : "", "; see braid train --help"));
}

const DataParallelMode& data_parallel_mode(std::string_view name) {
  std::string names;
  for (const DataParallelMode* m : data_parallel_modes()) {
    if (name == m->name) return *m;
    names += (names.empty() ? "" : ", ") + std::string(m->name);
  }
  throw ConfigError(detail::concat("'", name, "' is not a data-parallel mode; the modes are ", names));
}

}  // namespace braid::parallel
