#include "braid/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/plan.h"
#include "braid/parallel/plan_memory.h"

namespace braid::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// How the DP strand shards: ZeRO stage 0-3, or FSDP over all DP ranks or, as
// HSDP, within groups of S ranks (S a power of two below dp) replicated across.
struct Sharding {
  int zero = 0;
  bool fsdp = false;
  int shard_size = 0;
};
std::vector<Sharding> shardings(int dp) {
  if (dp < 2) return {{0}};  // nothing to shard: every stage is the same layout
  std::vector<Sharding> out = {{0}, {1}, {2}, {3}};
  out.push_back({0, true, 0});
  for (int s = 2; s < dp; s *= 2)
    if (dp % s == 0) out.push_back({0, true, s});
  return out;
}

// Every layout with degrees tp, cp, pp (dp the rest of n) that braid can run:
// micro-batch sizes, schedules, shardings, SP, recomputation, the CP form.
void add_layouts(std::vector<parallel::LayoutOptions>& out, const parallel::LayoutOptions& base,
                 const model::GPTConfig& cfg, int n, int tp, int cp, int pp) {
  const int64_t B = base.global_batch;
  const int dp = n / (tp * cp * pp);
  const std::vector<Sharding> sharded = shardings(dp * cp);  // ZeRO / FSDP shard over DP x CP
  for (int64_t mb : {1, 2, 4, 8, 16, 32}) {
    if (B % (dp * mb) != 0) continue;
    const int64_t m = B / (dp * mb);
    struct Sched { const parallel::ScheduleDef* def; int v; };
    std::vector<Sched> scheds;  // each schedule's chunk counts worth trying (pp = 1: 1f1b's one-stage program)
    for (const auto& d : parallel::schedules())
      for (int v : d.planner_chunks ? d.planner_chunks(pp, m, cfg.n_layer) : std::vector<int>{})
        scheds.push_back({&d, v});
    for (const Sched& s : scheds)
      for (const Sharding& sh : sharded)
        for (bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          for (const char* rc : {"none", "selective", "full"}) {
            if (s.def->refuse && !s.def->refuse({rc}).empty()) continue;
            parallel::LayoutOptions o = base;
            o.tp = tp, o.cp = cp, o.pp = pp, o.dp = dp, o.micro_batch = mb, o.micro_batches = 0;
            o.schedule = s.def->name, o.virtual_stages = s.v;
            o.zero = sh.zero, o.fsdp = sh.fsdp, o.fsdp_shard_size = sh.shard_size;
            o.sequence_parallel = sp, o.recompute = rc, o.pp_layers.clear();
            o.cp_comm = "ring";
            out.push_back(o);
            // All-to-all where the CP group divides a TP rank's heads.
            if (cp > 1 && (cfg.n_head / tp) % cp == 0) {
              o.cp_comm = "a2a";
              out.push_back(o);
            }
          }
        }
  }
}

// Every layout of base's model on n accelerators that braid can run.
std::vector<parallel::LayoutOptions> enumerate(const parallel::LayoutOptions& base, int n, const Cluster& c,
                                               const model::GPTConfig& cfg) {
  std::vector<parallel::LayoutOptions> out;
  for (int tp : divisors(std::min(n, c.accelerators_per_node))) {
    if (cfg.n_head % tp != 0 || cfg.padded_vocab_size % tp != 0) continue;
    for (int cp : divisors(n / tp)) {
      if (cp > 1 && base.seq_len % (2 * cp) != 0) continue;  // a CP group splits each sequence in 2 cp chunks
      for (int pp : divisors(n / (tp * cp)))
        if (pp <= cfg.n_layer) add_layouts(out, base, cfg, n, tp, cp, pp);
    }
  }
  return out;
}

}  // namespace

double largest_rank_bytes(const parallel::LayoutOptions& opt, int world) {
  // Within a stage ranks differ only by their shard (DP rank 0 has the largest).
  double peak = 0;
  for (const auto& p : parallel::plan_memory_per_stage(opt, world)) peak = std::max(peak, static_cast<double>(p.total()));
  return peak;
}

std::string describe_layout(const parallel::LayoutOptions& o, int world) {
  char buf[256];
  const int dp = world / (o.tp * o.cp * o.pp);
  const std::string sharding = !o.fsdp ? "zero=" + std::to_string(o.zero)
                               : o.fsdp_shard_size > 0 && o.fsdp_shard_size < dp ? "hsdp=" + std::to_string(o.fsdp_shard_size)
                                                       : std::string("fsdp");
  std::snprintf(buf, sizeof buf, "tp=%d%s%s pp=%d%s dp=%d mb=%lld %s recompute=%s", o.tp,
                o.sequence_parallel ? "+sp" : "",
                o.cp > 1 ? (" cp=" + std::to_string(o.cp) + (o.cp_comm == "a2a" ? " a2a" : "")).c_str() : "", o.pp,
                o.pp == 1 ? ""
                          : (" " + o.schedule + (o.virtual_stages > 1 ? "x" + std::to_string(o.virtual_stages) : ""))
                                .c_str(),
                dp, static_cast<long long>(o.micro_batch), sharding.c_str(), o.recompute.c_str());
  return buf;
}

std::string why_slower(const StepPrediction& o, const StepPrediction& b) {
  const std::pair<const char*, double> parts[] = {{"compute", o.compute - b.compute},
                                                 {"TP communication", o.tp_comm - b.tp_comm},
                                                 {"CP attention", o.cp_comm - b.cp_comm},
                                                 {"pipeline transfers", o.pp_comm - b.pp_comm},
                                                 {"bubble", o.bubble - b.bubble},
                                                 {"exposed DP sync", o.dp_exposed - b.dp_exposed},
                                                 {"optimizer", o.optimizer - b.optimizer}};
  std::vector<std::pair<const char*, double>> v(std::begin(parts), std::end(parts));
  std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  std::string s;
  for (const auto& [name, d] : v) {
    if (d <= 0.01 * b.step_s) continue;
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s+%.3g s %s", s.empty() ? "" : ", ", d, name);
    s += buf;
    if (s.size() > 60) break;
  }
  return s.empty() ? "within 1% of the best" : s;
}

SearchResult search_layouts(const parallel::LayoutOptions& base, int n, const Cluster& c, size_t keep) {
  const auto t0 = std::chrono::steady_clock::now();
  const model::GPTConfig cfg = parallel::model_config(base);
  SearchResult r;
  std::vector<Candidate> all;
  for (parallel::LayoutOptions& o : enumerate(base, n, c, cfg)) {
    Candidate k;
    try {
      k.estimate_s = predict_step(o, n, c, false).step_s;
    } catch (const ConfigError&) {
      continue;  // a layout braid refuses (uneven splits and the like)
    }
    k.opt = std::move(o);
    all.push_back(std::move(k));
  }
  BRAID_CONFIG_CHECK(!all.empty(), "no layout of this model runs on ", n, " accelerators with --batch ",
                     base.global_batch, "; try another accelerator count or batch");
  r.considered = all.size();
  std::sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) { return x.estimate_s < y.estimate_s; });
  // Exact memory and simulated schedules for the fastest, until `keep` fit.
  // The simulation may reorder them; going 3x deep keeps the winners among them.
  for (Candidate& k : all) {
    if (r.best.size() >= 3 * keep) break;
    k.layout = describe_layout(k.opt, n);
    k.checked = true;
    ++r.checked;
    k.peak_bytes = largest_rank_bytes(k.opt, n);
    k.fits = k.peak_bytes <= c.memory_bytes;
    if (!k.fits) {
      if (r.too_big.size() < keep) r.too_big.push_back(k);
      continue;
    }
    k.prediction = predict_step(k.opt, n, c, true);
    r.best.push_back(k);
  }
  // Equal times (ZeRO stages that move the same bytes here): the smaller memory first.
  std::sort(r.best.begin(), r.best.end(), [](const Candidate& x, const Candidate& y) {
    const double dx = x.prediction.step_s, dy = y.prediction.step_s;
    if (std::abs(dx - dy) > 1e-9 * std::max(dx, dy)) return dx < dy;
    return x.peak_bytes < y.peak_bytes;
  });
  if (r.best.size() > keep) r.best.resize(keep);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace braid::plan
