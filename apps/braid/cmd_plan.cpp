// `braid plan`: predicts, without running or allocating, the per-rank peak
// memory by category that `braid train` reports at the end of a run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/threads.h"
#include <nlohmann/json.hpp>

#include "braid/plan/cost_model.h"
#include "braid/plan/search.h"
#include "braid/plan/this_machine.h"
#ifdef BRAID_WITH_MPI
#include "braid/comm/backends/mpi.h"
#endif
#include "braid/parallel/plan_memory.h"

namespace braid::cli {

namespace {
struct PlanArgs {
  train::TrainOptions opt;
  int ranks = 1;
  bool all_ranks = false;
  std::string cluster, print_cluster;
  bool search = false, json = false;
  size_t top = 5;
  double tokens = 0;
};

nlohmann::json to_json(const plan::StepPrediction& p) {
  return {{"step_s", p.step_s},           {"tokens_per_s", p.tokens_per_s},
          {"tflops_per_accelerator", p.tflops_per_accelerator}, {"mfu", p.mfu},
          {"compute_s", p.compute},       {"tp_comm_s", p.tp_comm},
          {"pp_comm_s", p.pp_comm},       {"bubble_s", p.bubble},
          {"dp_exposed_s", p.dp_exposed}, {"optimizer_s", p.optimizer},
          {"micro_batches", p.micro_batches}};
}

// Ranks this process was launched among by mpirun (OpenMPI's or a PMI launcher's
// variable), 1 when started alone.
int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  return 1;
}

// this-machine, measured among the ranks mpirun launched (links between MPI
// processes, as `braid train` runs) or, started alone, among threads. Under
// mpirun only rank 0 gets the cluster; the others get nothing and stop.
std::optional<plan::Cluster> measure_this_machine_once() {
  if (launched_ranks() > 1) {
#ifdef BRAID_WITH_MPI
    comm::MpiRuntime mpi;
    auto world = mpi.world();
    plan::Cluster c = plan::measure_this_machine(world.get());
    if (world->rank() != 0) return std::nullopt;
    if (world->size() > c.accelerators_per_node)
      std::fprintf(stderr,
                   "braid plan: warning: %d ranks measured on %d cores at OMP_NUM_THREADS=%d (%d accelerators per "
                   "node): the ranks shared cores, so the figures describe an oversubscribed node; launch "
                   "cores / OMP_NUM_THREADS ranks\n",
                   world->size(), std::max(1u, std::thread::hardware_concurrency()), braid::omp_threads(),
                   c.accelerators_per_node);
    return c;
#endif
  }
  return plan::measure_this_machine();
}

// Time and accelerator-hours to train on `tokens` at the predicted rate.
nlohmann::json tokens_json(double tokens, const plan::StepPrediction& p, int accelerators) {
  const double s = tokens / p.tokens_per_s;
  return {{"tokens", tokens}, {"days", s / 86400}, {"accelerator_hours", s * accelerators / 3600}};
}

std::string tokens_line(double tokens, const plan::StepPrediction& p, int accelerators) {
  const nlohmann::json t = tokens_json(tokens, p, accelerators);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.4g tokens: %.4g days on %d accelerators, %.4g accelerator-hours\n", tokens,
                t["days"].get<double>(), accelerators, t["accelerator_hours"].get<double>());
  return buf;
}

// --search: the best layouts, why the others lose, and where the flags' own
// layout ranks when it is one of them.
void print_search(const PlanArgs& a, const plan::Cluster& c) {
  const plan::SearchResult r = plan::search_layouts(a.opt, a.ranks, c, a.top);
  BRAID_CONFIG_CHECK(!r.best.empty(), "no layout fits in ", format_bytes(c.memory_bytes), " per accelerator among the ",
                     r.checked, " fastest; use more accelerators, a smaller --batch or a smaller model");
  const plan::StepPrediction& best = r.best.front().prediction;
  // The flags' own layout, planned the same way.
  const std::string mine = plan::describe_layout(a.opt, a.ranks);
  double mine_bytes = 0;
  plan::StepPrediction mine_p;
  bool mine_ok = true;
  std::string mine_error;
  try {
    mine_bytes = plan::largest_rank_bytes(a.opt, a.ranks);
    mine_p = plan::predict_step(a.opt, a.ranks, c, true);
  } catch (const ConfigError& e) {
    mine_ok = false;
    mine_error = e.what();
  }
  if (a.json) {
    nlohmann::json j = {{"cluster", c.name}, {"accelerators", a.ranks}, {"considered", r.considered},
                        {"checked", r.checked}, {"seconds", r.seconds}};
    for (size_t i = 0; i < r.best.size(); ++i) {
      const auto& k = r.best[i];
      j["best"].push_back({{"layout", k.layout}, {"peak_bytes", static_cast<uint64_t>(k.peak_bytes)},
                           {"prediction", to_json(k.prediction)},
                           {"why_slower", i == 0 ? "" : plan::why_slower(k.prediction, best)}});
    }
    if (a.tokens > 0) j["tokens"] = tokens_json(a.tokens, best, a.ranks);
    for (const auto& k : r.too_big)
      j["too_big"].push_back(
          {{"layout", k.layout}, {"peak_bytes", static_cast<uint64_t>(k.peak_bytes)}, {"estimate_s", k.estimate_s}});
    if (mine_ok)
      j["yours"] = {{"layout", mine}, {"peak_bytes", static_cast<uint64_t>(mine_bytes)},
                    {"fits", mine_bytes <= c.memory_bytes}, {"prediction", to_json(mine_p)}};
    else
      j["yours"] = {{"error", mine_error}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("braid plan --search: %zu layouts on %d accelerators of %s (%s each); the %zu fastest by the "
              "closed-form estimate planned exactly and simulated, in %.1f s\n\n",
              r.considered, a.ranks, c.name.c_str(), format_bytes(c.memory_bytes).c_str(), r.checked, r.seconds);
  std::printf("%-4s %-52s %10s %8s %7s %10s  %s\n", "rank", "layout", "step (s)", "TFLOP/s", "MFU", "peak mem",
              "why slower than #1");
  for (size_t i = 0; i < r.best.size(); ++i) {
    const auto& k = r.best[i];
    std::printf("%-4zu %-52s %10.4g %8.3g %6.1f%% %10s  %s\n", i + 1, k.layout.c_str(), k.prediction.step_s,
                k.prediction.tflops_per_accelerator, 100 * k.prediction.mfu, format_bytes(k.peak_bytes).c_str(),
                i == 0 ? "" : plan::why_slower(k.prediction, best).c_str());
  }
  for (const auto& k : r.too_big)
    std::printf("does not fit: %s needs %s (estimate %.4g s)\n", k.layout.c_str(), format_bytes(k.peak_bytes).c_str(),
                k.estimate_s);
  if (!mine_ok) std::printf("\nyour flags' layout does not run here: %s\n", mine_error.c_str());
  if (mine_ok) {
    std::printf("\nyour flags' layout, %s: %.4g s (%.3g TFLOP/s per accelerator), peak %s%s\n", mine.c_str(),
                mine_p.step_s, mine_p.tflops_per_accelerator, format_bytes(mine_bytes).c_str(),
                mine_bytes <= c.memory_bytes ? "" : ": does not fit");
    for (size_t i = 0; i < r.best.size(); ++i)
      if (r.best[i].prediction.step_s < mine_p.step_s && r.best[i].layout != mine)
        std::printf("  #%zu %s beats it: yours has %s\n", i + 1, r.best[i].layout.c_str(),
                    plan::why_slower(mine_p, r.best[i].prediction).c_str());
  }
  if (a.tokens > 0) std::printf("\nwith #1, %s", tokens_line(a.tokens, best, a.ranks).c_str());
}

// The step-time model's prediction for the layout on `cluster`.
void print_prediction(const train::TrainOptions& opt, int ranks, const plan::Cluster& c, double tokens) {
  const plan::StepPrediction p = plan::predict_step(opt, ranks, c);
  std::printf("predicted on %d accelerators of %s (%d per node, matmuls at %.0f%% of peak):\n%s\n", ranks,
              c.name.c_str(), c.accelerators_per_node, 100 * c.matmul_fraction, plan::format_prediction(p).c_str());
  if (tokens > 0) std::printf("%s", tokens_line(tokens, p, ranks).c_str());
}

// --json without --search: the layout, its largest rank's peak and the prediction.
void print_prediction_json(const PlanArgs& a, const plan::Cluster& c) {
  const plan::StepPrediction p = plan::predict_step(a.opt, a.ranks, c);
  nlohmann::json j = {{"cluster", c.name}, {"accelerators", a.ranks},
                      {"layout", plan::describe_layout(a.opt, a.ranks)},
                      {"peak_bytes", static_cast<uint64_t>(plan::largest_rank_bytes(a.opt, a.ranks))},
                      {"prediction", to_json(p)}};
  if (a.tokens > 0) j["tokens"] = tokens_json(a.tokens, p, a.ranks);
  std::printf("%s\n", j.dump(2).c_str());
}

// The ranks whose tables are printed: every rank with --all-ranks or up to 8,
// else rank 0 and the largest.
std::vector<parallel::MemoryPlan> shown_ranks(const std::vector<parallel::MemoryPlan>& all, bool all_ranks) {
  if (all_ranks || all.size() <= 8) return all;
  std::vector<parallel::MemoryPlan> shown{all[0]};
  auto mx = std::max_element(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.total() < y.total(); });
  if (mx->rank != 0) shown.push_back(*mx);
  return shown;
}

// The memory plan: the model and layout line, the per-rank tables, the totals,
// the ledger lines `braid train` would print and the ZeRO formulas.
void print_memory_plan(const PlanArgs& a) {
  std::vector<parallel::MemoryPlan> all;
  all.reserve(static_cast<size_t>(a.ranks));
  for (int r = 0; r < a.ranks; ++r) all.push_back(parallel::plan_memory(a.opt, a.ranks, r));
  const std::vector<parallel::MemoryPlan> shown = shown_ranks(all, a.all_ranks);
  const parallel::MemoryPlan& p0 = all[0];
  const auto& cfg = p0.config;
  const auto& pl = p0.parallel;
  std::printf("braid plan | model %s (L=%lld H=%lld C=%lld V=%lld->%lld, %.2fM params) | ranks %d "
              "(%s) | batch %lld = %d x %lld x %lld accum | T=%lld | bucket %.2f MiB\n",
              cfg.name.c_str(), (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd,
              (long long)cfg.vocab_size, (long long)cfg.padded_vocab_size, p0.num_params / 1e6,
              a.ranks, pl.describe().c_str(), (long long)pl.global_batch, pl.dp.degree,
              (long long)pl.micro_batch, (long long)pl.pp.micro_batches, (long long)pl.seq_len, p0.options.bucket_mb);
  std::printf("\npredicted peak MemoryLedger bytes per rank (%s):\n%s",
              shown.size() == all.size() ? "every rank" : "rank 0 and the largest rank",
              parallel::format_plan_table(shown).c_str());
  size_t sum = 0, mx = 0;
  for (const auto& p : all) sum += p.total(), mx = std::max(mx, p.total());
  std::printf("total over %d ranks: %zu bytes (%s); largest rank: %zu bytes (%s)\n\n", a.ranks, sum,
              format_bytes(static_cast<double>(sum)).c_str(), mx, format_bytes(static_cast<double>(mx)).c_str());
  for (const auto& p : shown)
    std::printf("as `braid train` prints it, rank %d: %s\n", p.rank, parallel::format_ledger_line(p).c_str());
  std::printf("\n%s\n%s.\n", parallel::format_zero_formulas(shown).c_str(), parallel::kNotInLedger);
}

// The ranks of the job and the step-time model's flags (--cluster and what goes with it).
void add_plan_options(CLI::App* c, PlanArgs& a) {
  c->add_option("--ranks,--accelerators", a.ranks, "Ranks of the job (TP x DP x PP): one per accelerator")
      ->capture_default_str();
  c->add_flag("--all-ranks", a.all_ranks, "Print every rank (default: every rank up to 8, else rank 0 and the largest)");
  c->add_flag("--async-save", a.opt.async_save, "Count braid train --async-save's staging buffer (a bound: the pieces a rank writes)");
  c->add_option("--cluster", a.cluster,
                "Also predict the step time on this cluster: a preset (" + plan::cluster_preset_names() + "), this-machine "
                "(measured now; run it under mpirun as the job will run) or a TOML file")
      ->group("Time");
  c->add_option("--print-cluster", a.print_cluster, "Print a preset's TOML, or this-machine's measured figures (a start for a file of your own), and exit")
      ->group("Time");
  c->add_flag("--search", a.search, "With --cluster: rank the layouts that fit (TP, PP, schedule, DP, micro-batch, ZeRO or FSDP/HSDP, "
              "SP, recompute) by predicted step time")->group("Time");
  c->add_option("--top", a.top, "With --search: how many layouts to show")->check(CLI::Range(1, 100))
      ->capture_default_str()->group("Time");
  c->add_option("--tokens", a.tokens, "With --cluster: the time and accelerator-hours to train on this many tokens")
      ->check(CLI::PositiveNumber)->group("Time");
  c->add_flag("--json", a.json, "With --cluster: print the prediction (or the search) as JSON")->group("Time");
}

// `braid plan`: a cluster's TOML (--print-cluster), the search, the JSON
// prediction, or the memory plan and, with --cluster, the predicted step.
void run_plan(const PlanArgs& a) {
  std::optional<plan::Cluster> measured;
  const std::string& wanted = a.print_cluster.empty() ? a.cluster : a.print_cluster;
  if (wanted == "this-machine") {
    measured = measure_this_machine_once();
    if (!measured) return;  // a rank other than 0 of mpirun: measured, nothing to print
  }
  if (!a.print_cluster.empty()) {
    std::printf("%s", measured ? ("# measured by braid on this machine\n" + plan::format_cluster(*measured)).c_str()
                               : plan::cluster_preset_text(a.print_cluster).c_str());
    return;
  }
  // The plan places every rank in its groups, so the rank count bounds its memory.
  constexpr int kMaxRanks = 1 << 20;
  BRAID_CONFIG_CHECK(a.ranks >= 1 && a.ranks <= kMaxRanks, "--ranks ", a.ranks, " must be in [1, ", kMaxRanks,
                     "] (braid plan places every rank in its groups)");
  BRAID_CONFIG_CHECK(!a.cluster.empty() || !(a.search || a.json || a.tokens > 0),
                     "--search, --json and --tokens need --cluster (a preset: ", plan::cluster_preset_names(), ", or a file)");
  // A cluster that does not load is refused before any table is printed.
  const plan::Cluster cl = measured ? *measured : a.cluster.empty() ? plan::Cluster{} : plan::load_cluster(a.cluster);
  // The ranks fill the cluster's nodes in order, as mpirun's by-slot mapping does:
  // the placement rules of `braid train` apply to that node map.
  PlanArgs placed = a;
  if (!a.cluster.empty()) placed.opt.nodes = plan::cluster_nodes(cl, a.ranks);
  if (a.search) return print_search(placed, cl);
  if (a.json) return print_prediction_json(placed, cl);
  print_memory_plan(placed);
  if (!a.cluster.empty()) print_prediction(placed.opt, a.ranks, cl, a.tokens);
}
}  // namespace

void add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand(
      "plan", "Predict the per-rank peak memory by category of `braid train` (allocates nothing)");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_and_layout_options(c, a->opt);
  add_plan_options(c, *a);
  c->callback([a] { run_plan(*a); });
}

}  // namespace braid::cli
