// The `this-machine` cluster: braid measures the machine it runs on instead of
// reading a description. An accelerator is a rank with its compute threads
// (OMP_NUM_THREADS); a node holds as many as the machine has cores for.
#pragma once
#include "braid/comm/communicator.h"
#include "braid/plan/cluster.h"

namespace braid::plan {

/// Measures the machine as `braid train` runs on it, with OMP_NUM_THREADS
/// threads per rank and every rank of the node at work at once (ranks on one
/// host share its memory, caches and clocks, so a layout that fills the node sees
/// these rates):
/// - the f32 matmul ceiling (oneDNN at a large GPT-2 shape) as peak_fp32, and
///   peak_bf16 / peak_fp16 as it times oneDNN's half-precision ceiling over
///   f32's at that shape (1 where oneDNN has no such matmul here: braid then
///   multiplies in f32);
/// - matmul_fraction and backward_matmul_fraction fitted so that the cost
///   model's block (block_forward_work) takes the time a block of braid's own
///   GPT takes here, forward and backward, at (B, T, C, heads) = (4, 128, 768, 12),
///   each step beside a ceiling probe (medians of the per-step ratios, and of
///   the probes for the ceiling);
/// - memory_bandwidth as braid's optimizer streams (the norm's pass and AdamW,
///   optimizer_bytes_per_element per element);
/// - the link's alpha-beta fitted to braid's ring all-reduce among the ranks at
///   64 KiB to 64 MiB (its 2(p-1)(alpha + n/(p beta))), used for every link since
///   the ranks share one machine.
/// world: the ranks of `braid plan` under mpirun (2 or more), each measuring
/// itself and the links between them as MPI processes; null: the node's ranks as
/// threads of this process (the local backend's links). Takes a few seconds; a
/// collective call on every rank of `world`.
Cluster measure_this_machine(comm::Communicator* world = nullptr);

}  // namespace braid::plan
