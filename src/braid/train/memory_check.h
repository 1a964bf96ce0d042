// Memory checked before allocating: every rank's planned peak (the plan of
// `braid plan`, plus the checkpoint copies it does not count) against this
// rank's share of the host's memory, so a layout that cannot fit fails at once
// instead of in std::bad_alloc or the OOM killer minutes later.
#pragma once
#include <cstdint>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/train/options.h"

namespace braid::train {

/// Bytes a rank holds beyond the ledger while saving or loading a checkpoint
/// (training_checkpoint.cpp): its local parameters, m and v as full f32 copies,
/// plus the whole model's three arrays under TP or PP (and the TP gather).
/// n_local: the rank's flat parameter elements; n_full: the whole model's.
uint64_t checkpoint_copy_bytes(const TrainOptions& opt, uint64_t n_local, uint64_t n_full, int tp, int pp);

/// The worst rank's planned peak bytes for `opt` on world_size ranks, with
/// the checkpoint copies when opt saves or resumes; *rank_out is that rank.
uint64_t worst_rank_peak(const TrainOptions& opt, int world_size, int* rank_out = nullptr,
                         std::string* breakdown = nullptr);

/// Throws ConfigError when the worst rank's peak exceeds budget_bytes (one
/// rank's share; `budget_text` says where it comes from), naming that rank's
/// largest categories and single-flag changes (--zero, --recompute,
/// --micro-batch, --precision) under which every rank fits.
void check_memory_fits(const TrainOptions& opt, int world_size, uint64_t budget_bytes, const std::string& budget_text);

/// Ranks of `world` on this host: all of them for ranks as threads; under
/// mpirun the launcher's local size (OMPI_COMM_WORLD_LOCAL_SIZE, or
/// MPI_LOCALNRANKS); else all of them (the safe guess).
int ranks_on_this_host(const comm::Communicator& world);

/// The check of check_memory_fits against this rank's share: --max-memory
/// when given, else the host's available memory (or cgroup headroom) divided
/// among the ranks on it. Does nothing when neither is known. Collective-free.
void check_memory_before_allocating(const TrainOptions& opt, const comm::Communicator& world);

}  // namespace braid::train
