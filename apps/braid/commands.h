// Sub-commands of the `braid` CLI. Each add_* registers its sub-command on the
// app and sets a callback that does the work; errors are thrown as braid::Error
// and reported by main().
#pragma once
#include <CLI/CLI.hpp>

#include "braid/train/trainer.h"

namespace braid::cli {

void add_prepare_data(CLI::App& app);  // tokenize a corpus into a .bin token file
void add_train(CLI::App& app);         // the main job (MPI or one process)
void add_bench_comm(CLI::App& app);    // collective busbw sweep, ours vs MPI's own
void add_bench_step(CLI::App& app);    // training-step tokens/s and MFU
void add_plan(CLI::App& app);          // predicted per-rank peak memory by category
void add_schedule(CLI::App& app);      // pipeline schedule table / SVG and its bubble
void add_verify(CLI::App& app);        // check checkpoint files without training

/// The model and parallel-layout flags of `train` and `plan` (--model, sizes,
/// --batch, --micro-batch, --seq-len, --zero, --fsdp, --tp, --pp, ...).
void add_model_and_layout_options(CLI::App* c, train::TrainOptions& o);

/// Set by a command that initialised MPI with more than one rank, so main()
/// takes the whole job down on error instead of leaving peers hanging.
extern bool g_abort_job_on_error;

}  // namespace braid::cli
