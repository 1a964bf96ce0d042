// `braid plan`: predicts, without running or allocating, the per-rank peak
// memory by category that `braid train` reports at the end of a run.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/plan/cost_model.h"
#include "braid/train/plan.h"

namespace braid::cli {

namespace {
struct PlanArgs {
  train::TrainOptions opt;
  int ranks = 1;
  bool all_ranks = false;
  std::string cluster, print_cluster;
};

// The step-time model's prediction for the layout on `cluster`.
void print_prediction(const train::TrainOptions& opt, int ranks, const std::string& cluster) {
  const plan::Cluster c = plan::load_cluster(cluster);
  const plan::StepPrediction p = plan::predict_step(opt, ranks, c);
  std::printf("predicted on %d accelerators of %s (%d per node, matmuls at %.0f%% of peak):\n%s\n", ranks,
              c.name.c_str(), c.accelerators_per_node, 100 * c.matmul_fraction, plan::format_prediction(p).c_str());
}
}  // namespace

void add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto& o = a->opt;
  CLI::App* c = app.add_subcommand(
      "plan", "Predict the per-rank peak memory by category of `braid train` (allocates nothing)");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_and_layout_options(c, o);
  c->add_option("--ranks", a->ranks, "Ranks of the job (TP x DP x PP)")->capture_default_str();
  c->add_flag("--all-ranks", a->all_ranks, "Print every rank (default: every rank up to 8, else rank 0 and the largest)");
  c->add_option("--cluster", a->cluster,
                "Also predict the step time on this cluster: a preset (a100-80gb, h100-80gb, h200) or a TOML file")
      ->group("Time");
  c->add_option("--print-cluster", a->print_cluster, "Print a preset's TOML (a start for a file of your own) and exit")
      ->group("Time");

  c->callback([a] {
    if (!a->print_cluster.empty()) {
      std::printf("%s", plan::cluster_preset_text(a->print_cluster).c_str());
      return;
    }
    train::TrainOptions opt = a->opt;
    BRAID_CONFIG_CHECK(a->ranks >= 1, "--ranks ", a->ranks, " must be >= 1");
    std::vector<train::MemoryPlan> all;
    all.reserve(static_cast<size_t>(a->ranks));
    for (int r = 0; r < a->ranks; ++r) all.push_back(train::plan_memory(opt, a->ranks, r));
    std::vector<train::MemoryPlan> shown;
    if (a->all_ranks || a->ranks <= 8) {
      shown = all;
    } else {
      shown.push_back(all[0]);
      auto mx = std::max_element(all.begin(), all.end(),
                                 [](const auto& x, const auto& y) { return x.total() < y.total(); });
      if (mx->rank != 0) shown.push_back(*mx);
    }
    const train::MemoryPlan& p0 = all[0];
    const auto& cfg = p0.config;
    const auto& ro = p0.options;
    const auto& pl = p0.parallel;
    std::printf("braid plan | model %s (L=%lld H=%lld C=%lld V=%lld->%lld, %.2fM params) | ranks %d "
                "(%s) | batch %lld = %d x %lld x %lld accum | T=%lld | bucket %.2f MiB\n",
                cfg.name.c_str(), (long long)cfg.n_layer, (long long)cfg.n_head, (long long)cfg.n_embd,
                (long long)cfg.vocab_size, (long long)cfg.padded_vocab_size, p0.num_params / 1e6,
                a->ranks, pl.describe().c_str(), (long long)pl.global_batch, pl.dp.degree,
                (long long)pl.micro_batch, (long long)pl.pp.micro_batches, (long long)pl.seq_len, ro.bucket_mb);
    std::printf("\npredicted peak MemoryLedger bytes per rank (%s):\n%s",
                shown.size() == all.size() ? "every rank" : "rank 0 and the largest rank",
                train::format_plan_table(shown).c_str());
    size_t sum = 0, mx = 0;
    for (const auto& p : all) sum += p.total(), mx = std::max(mx, p.total());
    std::printf("total over %d ranks: %zu bytes (%s); largest rank: %zu bytes (%s)\n\n", a->ranks, sum,
                format_bytes(static_cast<double>(sum)).c_str(), mx, format_bytes(static_cast<double>(mx)).c_str());
    for (const auto& p : shown)
      std::printf("as `braid train` prints it, rank %d: %s\n", p.rank, train::format_ledger_line(p).c_str());
    std::printf("\n%s\n%s.\n", train::format_zero_formulas(shown).c_str(), train::kNotInLedger);
    if (!a->cluster.empty()) print_prediction(a->opt, a->ranks, a->cluster);
  });
}

}  // namespace braid::cli
