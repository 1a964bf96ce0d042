// Sub-commands of the `braid` CLI. Each add_* registers its sub-command on the
// app and sets a callback that does the work; errors are thrown as braid::Error
// and reported by main().
#pragma once
#include <CLI/CLI.hpp>

#include "braid/data/token_file.h"
#include "braid/train/trainer.h"

namespace braid::cli {

void add_prepare_data(CLI::App& app);  // tokenize a corpus into a .bin token file
void add_train(CLI::App& app);         // the main job (MPI or one process)
void add_bench_comm(CLI::App& app);    // collective busbw sweep, ours vs MPI's own
void add_bench_attention(CLI::App& app);  // causal attention alone: fused vs saved probabilities
void add_bench_block_parts(CLI::App& app);  // RMSNorm, rotary positions, SwiGLU alone
void add_bench_step(CLI::App& app);    // training-step tokens/s and MFU
void add_plan(CLI::App& app);          // predicted per-rank peak memory by category
void add_schedule(CLI::App& app);      // pipeline schedule table / SVG and its bubble
void add_verify(CLI::App& app);        // check checkpoint files without training
void add_export(CLI::App& app);        // checkpoint -> Hugging Face directory / llm.c model file
void add_import(CLI::App& app);        // Hugging Face directory / llm.c model file -> checkpoint
void add_eval(CLI::App& app);          // loss / perplexity of a checkpoint on a token file
void add_sample(CLI::App& app);        // text from a checkpoint after a prompt
void add_run(CLI::App& app);           // supervise a launch: end it on a failure, restart it elastically

/// Thrown by a command to end braid with `code` (no message: the command has
/// said why); main() returns it.
struct ExitWith {
  int code;
};

/// `braid train`'s options as ARGS (the words after `braid train`, --config
/// expanded) set them, without running anything. Throws ConfigError for an
/// option train does not know or a bad value.
train::TrainOptions parse_train_options(const std::vector<std::string>& args);

/// A validator (use with ->transform) that accepts one of `names` in any case
/// and stores it lower-cased; help shows {a,b,c}.
CLI::Validator one_of(std::vector<std::string> names);
/// The --schedule values (the pipeline schedule registry) and their help: one line per schedule.
std::vector<std::string> schedule_choices();
std::string schedule_help();

/// The model and parallel-layout flags of `train` and `plan` (--model, sizes,
/// --batch, --micro-batch, --seq-len, --zero, --fsdp, --tp, --pp, ...).
void add_model_and_layout_options(CLI::App* c, train::TrainOptions& o);

/// The tokens of a token file (braid prepare-data), mapped read-only (not
/// copied) and checked against GPT-2's vocabulary; `what` ("train", "val",
/// "eval") names it and its flag in errors. `format`: --data-format (auto or
/// nanogpt, data::parse_token_format).
/// The token file at `path` mapped, checked to be tokenized for GPT-2's
/// vocabulary or `model_vocab` (the model's); `what` names it in errors.
data::MappedTokens load_tokens(const std::string& path, const char* what, const std::string& format = "auto",
                               int64_t model_vocab = 50257);

/// Set by a command that initialised MPI with more than one rank, so main()
/// takes the whole job down on error instead of leaving peers hanging.
extern bool g_abort_job_on_error;

}  // namespace braid::cli
