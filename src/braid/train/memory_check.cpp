#include "braid/train/memory_check.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/host_memory.h"
#include "braid/core/memory.h"
#include "braid/model/param_layout.h"
#include "braid/parallel/plan_memory.h"

namespace braid::train {

uint64_t checkpoint_copy_bytes(const TrainOptions& opt, uint64_t n_local, uint64_t n_full, int tp, int pp) {
  if (opt.save_dir.empty() && opt.resume.empty()) return 0;
  uint64_t b = 12 * n_local;                                 // params, m, v of this rank
  if (tp > 1 || pp > 1) b += 12 * n_full;                    // the whole model's three arrays
  if (tp > 1) b += 4 * n_local * static_cast<uint64_t>(tp);  // one array's TP gather
  return b;
}

uint64_t worst_rank_peak(const TrainOptions& opt, int world_size, int* rank_out, std::string* breakdown) {
  uint64_t worst = 0;
  for (int r = 0; r < world_size; ++r) {
    const parallel::MemoryPlan p = parallel::plan_memory(opt, world_size, r);
    const uint64_t n_full = model::unit_bounds(p.config, 1).back();
    const uint64_t ck = checkpoint_copy_bytes(opt, p.num_params, n_full, p.parallel.tp.degree, p.parallel.pp.stages);
    const uint64_t need = p.total() + ck;
    if (need <= worst && r > 0) continue;
    worst = need;
    if (rank_out) *rank_out = r;
    if (!breakdown) continue;
    // The largest categories first.
    std::vector<std::pair<uint64_t, std::string>> parts;
    for (size_t c = 0; c < kNumMemCategories; ++c)
      if (p.bytes[c]) parts.push_back({p.bytes[c], mem_category_name(static_cast<MemCategory>(c))});
    if (ck) parts.push_back({ck, "checkpoint copies"});
    std::sort(parts.rbegin(), parts.rend());
    breakdown->clear();
    for (size_t i = 0; i < parts.size() && i < 4; ++i)
      *breakdown += (i ? ", " : "") + parts[i].second + " " + format_bytes(static_cast<double>(parts[i].first));
  }
  return worst;
}

namespace {

// Single-flag changes to try, as (flag text, options).
std::vector<std::pair<std::string, TrainOptions>> alternatives(const TrainOptions& o) {
  std::vector<std::pair<std::string, TrainOptions>> out;
  auto with = [&](const std::string& flag, auto change) {
    TrainOptions t = o;
    change(t);
    out.push_back({flag, t});
  };
  if (!o.fsdp && o.dp_mode == "ddp")
    for (int z = o.zero + 1; z <= 3; ++z) with("--zero " + std::to_string(z), [z](TrainOptions& t) { t.zero = z; });
  if (o.recompute == "none") with("--recompute selective", [](TrainOptions& t) { t.recompute = "selective"; });
  if (o.recompute != "full") with("--recompute full", [](TrainOptions& t) { t.recompute = "full"; });
  if (o.micro_batches == 0)
    for (int64_t mb = o.micro_batch / 2; mb >= 1; mb /= 2)
      with("--micro-batch " + std::to_string(mb), [mb](TrainOptions& t) { t.micro_batch = mb; });
  if (o.precision == "fp32") with("--precision bf16", [](TrainOptions& t) { t.precision = "bf16"; });
  return out;
}


// The worst rank's peak under `t`, or nullopt when t is no valid layout for this job.
std::optional<uint64_t> peak_of(const TrainOptions& t, int world_size) {
  try {
    return worst_rank_peak(t, world_size);
  } catch (const ConfigError&) {
    return std::nullopt;
  }
}

// Single changes that fit, as "flag (peak), ..."; else the changes that lower
// the peak most, combined greedily (at most 4), when together they fit.
std::string what_would_fit(const TrainOptions& opt, int world_size, uint64_t budget) {
  std::string fits;
  for (const auto& [flag, t] : alternatives(opt)) {
    const auto n = peak_of(t, world_size);
    if (n && *n <= budget && fits.size() < 400)
      fits += (fits.empty() ? "" : ", ") + flag + " (" + format_bytes(static_cast<double>(*n)) + ")";
  }
  if (!fits.empty()) return fits;
  TrainOptions cur = opt;
  std::string flags;
  for (int step = 0; step < 4; ++step) {
    std::optional<std::pair<uint64_t, std::pair<std::string, TrainOptions>>> best;
    for (auto& alt : alternatives(cur)) {
      const auto n = peak_of(alt.second, world_size);
      if (n && (!best || *n < best->first)) best = {*n, alt};
    }
    if (!best) break;
    cur = best->second.second;
    flags += (flags.empty() ? "" : " ") + best->second.first;
    if (best->first <= budget) return flags + " together (" + format_bytes(static_cast<double>(best->first)) + ")";
  }
  return "";
}

}  // namespace

void check_memory_fits(const TrainOptions& opt, int world_size, uint64_t budget, const std::string& budget_text) {
  int rank = 0;
  std::string parts;
  const uint64_t need = worst_rank_peak(opt, world_size, &rank, &parts);
  if (need <= budget) return;
  const std::string fits = what_would_fit(opt, world_size, budget);
  throw ConfigError(detail::concat(
      "rank ", rank, " needs ", format_bytes(static_cast<double>(need)), " at its peak (", parts, ") but has ",
      format_bytes(static_cast<double>(budget)), " (", budget_text, "); ",
      fits.empty() ? std::string("no change of --zero, --recompute, --micro-batch or --precision fits: "
                                 "use more ranks (--tp, --pp, a larger data-parallel degree with --zero 3) or a smaller model")
                   : "would fit: " + fits,
      ". `braid plan` with the same flags shows every rank's categories"));
}

int ranks_on_this_host(const comm::Communicator& world) {
  if (world.backend() == "local") return world.size();
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n >= 1 && n <= world.size()) return n;
    }
  return world.size();
}

void check_memory_before_allocating(const TrainOptions& opt, const comm::Communicator& world) {
  if (opt.max_memory > 0) {
    check_memory_fits(opt, world.size(), opt.max_memory,
                      "--max-memory " + format_bytes(static_cast<double>(opt.max_memory)) + " per rank");
    return;
  }
  const auto avail = host_memory_available();
  if (!avail) return;
  const int here = ranks_on_this_host(world);
  check_memory_fits(opt, world.size(), *avail / static_cast<uint64_t>(here),
                    detail::concat("the host's ", format_bytes(static_cast<double>(*avail)),
                                   " available shared by ", here, " ranks on it; --max-memory sets it"));
}

}  // namespace braid::train
