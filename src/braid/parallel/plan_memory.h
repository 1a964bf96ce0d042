// `braid plan`: the per-rank peak memory of a training job by MemCategory,
// predicted without allocating anything. The prediction reads the same size
// functions the allocating code uses (model::memory_plan, GradBuckets::plan), so
// it equals what Trainer's MemoryLedger reports at the end of `braid train`.
// Memory outside the ledger is not predicted (see kNotInLedger).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/plan.h"

namespace braid::parallel {

/// One rank's predicted peak ledger bytes.
struct MemoryPlan {
  LayoutOptions options;       // resolved (model-dependent defaults filled in)
  ParallelPlan parallel;       // the layout, as `braid train` resolves it
  model::GPTConfig config;
  int world_size = 1, rank = 0;
  size_t num_params = 0;       // Ψ: elements of the flat parameter buffer (incl. alignment gaps)
  size_t optimizer_elems = 0;  // elements of each AdamW moment on this rank (Ψ, or the ZeRO-1 shard)
  std::array<size_t, kNumMemCategories> bytes{};  // peak bytes per MemCategory

  size_t at(MemCategory c) const { return bytes[static_cast<size_t>(c)]; }
  /// Peak total in bytes (every buffer lives from start-up to the end, so the
  /// peak total is the sum of the per-category peaks).
  size_t total() const;
  /// params + master_params + grads + optimizer, in bytes.
  size_t model_state_bytes() const;
};

/// Predicts rank `rank`'s peak MemoryLedger bytes by category for
/// `braid train` with options `opt` on `world_size` ranks: GPT params, grads,
/// activations and workspace for (micro_batch, seq_len); AdamW m and v over
/// this rank's optimizer state; the trainer's token/target buffers; the ZeRO-1
/// comm staging buffer. Allocates no model-sized memory. Throws ConfigError
/// when the options are invalid for world_size (as Trainer would) or rank is
/// outside [0, world_size).
MemoryPlan plan_memory(const LayoutOptions& opt, int world_size, int rank);
/// plan_memory of each pipeline stage's first rank (TP and DP rank 0, which holds
/// the largest shard), the schedule simulated once: element s is stage s.
std::vector<MemoryPlan> plan_memory_per_stage(const LayoutOptions& opt, int world_size);

/// The same one-line format as MemoryLedger::report() ("params=... total=..."),
/// so a plan can be compared with the "peak memory rank R:" line of train.
std::string format_ledger_line(const MemoryPlan& p);

/// A table of exact bytes (and MiB) per category, one row per plan given.
std::string format_plan_table(const std::vector<MemoryPlan>& plans);

/// The model-state bytes per rank the ZeRO paper predicts (Rajbhandari et al.
/// 2020, sec. 5): stage 0 (p+g+K)Ψ, 1 (p+g)Ψ + KΨ/N, 2 pΨ + (g+K)Ψ/N, 3
/// (p+g+K)Ψ/N, with p = g = 2, K = 12 in mixed precision and p = g = 4, K = 8 in
/// fp32 (no separate master copy). N: the ranks the state is sharded over.
struct ZeroFormula {
  double bytes = 0;
  std::string text;  // e.g. "2 Psi + (2+12) Psi/N"
};
ZeroFormula zero_formula(const ParallelPlan& plan, size_t psi, int N);

/// The formula for the plans' options next to each plan's predicted model states.
std::string format_zero_formulas(const std::vector<MemoryPlan>& plans);

/// What the ledger (and so the plan) does not count.
extern const char* const kNotInLedger;

}  // namespace braid::parallel
