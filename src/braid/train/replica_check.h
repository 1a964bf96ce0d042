// --check-replicas: every step, the copies of a parameter that must be equal
// are compared bitwise (the parity rule of docs/ARCHITECTURE.md, checked while training).
#pragma once
#include <cstdint>

#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/plan.h"

namespace braid::train {

/// Compares, by FNV-1a hash of the parameter bytes: the DP replicas (ranks of
/// one DP group hold the same parameters); under TP the tensors replicated over
/// the TP group (LayerNorms, wpe, row-parallel biases); under PP the tied
/// embedding's copies on the first and the last stage. Collective over the
/// world (every rank calls it at the same step). Returns this rank's hash of
/// its parameters (GradSync::hash_params). Throws braid::Error naming the
/// group, the step and the rank that differs.
uint64_t check_replicas(parallel::ParallelContext& ctx, model::GPT& model, parallel::GradSync& sync, int64_t step);

}  // namespace braid::train
