// braid plan --search: the layouts of a model on N accelerators of a cluster,
// ranked by predicted step time among those that fit in memory.
#pragma once
#include <string>
#include <vector>

#include "braid/plan/cost_model.h"

namespace braid::plan {

struct Candidate {
  parallel::LayoutOptions opt;     // the layout as `braid train` flags
  std::string layout;          // "tp=8 sp pp=64 1f1b dp=6 mb=1 zero=1 recompute=full"
  double estimate_s = 0;       // step time with the closed-form bubble (pruning)
  bool checked = false;        // memory planned exactly and the schedule simulated
  bool fits = false;
  double peak_bytes = 0;       // the largest rank's planned peak (checked only)
  StepPrediction prediction;   // simulated when checked
};

struct SearchResult {
  std::vector<Candidate> best;       // fitting, fastest first (at most `keep`)
  std::vector<Candidate> too_big;    // faster by estimate than the best, but over the memory
  size_t considered = 0;             // valid layouts enumerated
  size_t checked = 0;                // planned exactly
  double seconds = 0;                // the search's own run time
};

/// Enumerates TP (a divisor of the node's accelerators and of the heads), PP (up
/// to the layers), DP, micro-batch, schedule (1f1b, interleaved with 2 or 4
/// chunks, zb-h1), ZeRO stage 0/1/2/3 or FSDP (over all DP ranks, or HSDP within
/// groups of a power of two below the DP degree), sequence parallelism and recomputation for
/// `base`'s model, batch, sequence and precision on `accelerators`; ranks them by
/// the closed-form estimate, then plans the memory of the fastest exactly and
/// simulates their schedules until `keep` fit. Throws ConfigError when no layout
/// is valid.
SearchResult search_layouts(const parallel::LayoutOptions& base, int accelerators, const Cluster& cluster, size_t keep);

/// The largest rank's exact peak bytes for a layout (braid plan's ledger).
double largest_rank_bytes(const parallel::LayoutOptions& opt, int world);

/// "tp=8 pp=64 1f1b dp=6 mb=1 zero=0 recompute=full" for a layout.
std::string describe_layout(const parallel::LayoutOptions& opt, int world);

/// Why `other` is slower than `best`: the parts of its step that grew most
/// ("+3.1 s bubble, +0.4 s TP communication").
std::string why_slower(const StepPrediction& other, const StepPrediction& best);

}  // namespace braid::plan
