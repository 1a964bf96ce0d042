// braid: train GPT-2 models across many processes.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "braid/commands.h"
#include "braid/version.h"
#include "config_file.h"
#include "braid/core/error.h"
#include "braid/train/preemption.h"
#ifdef BRAID_WITH_MPI
#include <mpi.h>

#include "braid/comm/backends/mpi.h"
#endif

namespace braid::cli {
bool g_abort_job_on_error = false;
}

int main(int argc, char** argv) {
  // First, before any thread exists: every later thread inherits the block, so
  // stop signals never land on a thread running kernels (preemption.h).
  braid::train::StopSignalThread stop_signals;
  CLI::App app{"braid: trains GPT-2 language models across many processes"};
  app.require_subcommand(1);
  braid::cli::add_prepare_data(app);
  braid::cli::add_train(app);
  braid::cli::add_bench_comm(app);
  braid::cli::add_bench_step(app);
  braid::cli::add_bench_attention(app);
  braid::cli::add_bench_block_parts(app);
  braid::cli::add_plan(app);
  braid::cli::add_schedule(app);
  braid::cli::add_verify(app);
  braid::cli::add_export(app);
  braid::cli::add_import(app);
  braid::cli::add_eval(app);
  braid::cli::add_sample(app);
  braid::cli::add_run(app);
  app.set_version_flag("--version", std::string("braid ") + BRAID_VERSION + " (commit " + BRAID_COMMIT + ")");
  braid::cli::add_config_option(app);
  std::string config;
  try {
    // --config FILE: the file's options go before the command line's, which win.
    std::vector<std::string> args = braid::cli::expand_config(app, argc, argv, &config);
    std::vector<char*> cargv;
    for (std::string& s : args) cargv.push_back(s.data());
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every other parse
    // error is a configuration error.
    const int rc = app.exit(e);
    if (rc != 0 && !config.empty())
      std::fprintf(stderr, "braid: the options of --config %s were read before the command line's\n", config.c_str());
    return rc == 0 ? 0 : static_cast<int>(braid::ExitCode::config);
  } catch (const braid::cli::ExitWith& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    std::fflush(stderr);
    int code = static_cast<int>(braid::exit_code_of(e));
#ifdef BRAID_WITH_MPI
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (braid::cli::g_abort_job_on_error && init && !fin) {
      // In a multi-rank job any other error is a failed rank; mpirun exits with this code.
      if (code == static_cast<int>(braid::ExitCode::error)) code = static_cast<int>(braid::ExitCode::rank_failure);
      braid::comm::abort_job(code);
    }
#endif
    return code;
  }
  return 0;
}
