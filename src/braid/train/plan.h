// `braid plan`: the per-rank peak memory of a training job by MemCategory,
// predicted without allocating anything. The prediction reads the same size
// functions the allocating code uses (GPT::memory_plan, ZeroStage1::plan), so
// it equals what Trainer's MemoryLedger reports at the end of `braid train`.
// Memory outside the ledger is not predicted (see kNotInLedger).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/train/trainer.h"

namespace braid::train {

/// One rank's predicted peak ledger bytes.
struct MemoryPlan {
  TrainOptions options;        // resolved (model-dependent defaults filled in)
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
MemoryPlan plan_memory(const TrainOptions& opt, int world_size, int rank);

/// The same one-line format as MemoryLedger::report() ("params=... total=..."),
/// so a plan can be compared with the "peak memory rank R:" line of train.
std::string format_ledger_line(const MemoryPlan& p);

/// A table of exact bytes (and MiB) per category, one row per plan given.
std::string format_plan_table(const std::vector<MemoryPlan>& plans);

/// The fp32 model-state formulas of the ZeRO paper for reference: 16Ψ bytes per
/// rank for DDP (4Ψ params + 4Ψ grads + 8Ψ AdamW moments) and 4Ψ + 4Ψ + 8Ψ/N
/// for ZeRO-1, next to the predicted model-state bytes of each plan.
std::string format_zero_formulas(const std::vector<MemoryPlan>& plans);

/// What the ledger (and so the plan) does not count.
extern const char* const kNotInLedger;

}  // namespace braid::train
