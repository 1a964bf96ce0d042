// `braid train`: the main job. Launch with `mpirun -np N braid train ...` (one
// process per rank), as a single process, or with `--backend local --ranks N`
// (ranks as threads in one process, used by tests).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "braid/commands.h"
#include "config_file.h"
#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/host_memory.h"
#include "braid/core/parse.h"
#include "braid/data/token_file.h"
#include "braid/data/tokenizer.h"
#include "braid/kernels/cpu/probes.h"
#include "braid/parallel/placement.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/train/preemption.h"
#include "braid/train/resume.h"
#include "braid/train/trainer.h"
#include "braid/version.h"
#ifdef BRAID_WITH_MPI
#include "braid/comm/backends/mpi.h"
#endif

namespace braid::cli {

namespace {

struct TrainArgs {
  train::TrainOptions opt;
  std::string train_data = "data/brown_train.bin";
  std::string val_data = "data/brown_val.bin";
  std::string data_format = "auto";
  std::string backend = "mpi";
  int local_ranks = 1;
  std::string nodes;  // --nodes: the local ranks' node map ("2+1")
  std::string algo = "ring";
  comm::CommOptions comm;
  std::string given, resolved;  // the options set (file or flags) and every option, as TOML key=value lines
};

// TOML "key=value" lines -> a JSON object (values parsed as JSON where they are:
// numbers, booleans, quoted strings, arrays; kept as text otherwise).
nlohmann::json toml_lines_to_json(const std::string& text) {
  nlohmann::json out = nlohmann::json::object();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos || line[0] == '#' || line[0] == '[') continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    nlohmann::json v = nlohmann::json::parse(value, nullptr, false);
    out[key] = v.is_discarded() ? nlohmann::json(value) : v;
  }
  return out;
}

// The metrics file's first record: the resolved configuration, the build, the
// time, and which host each rank runs on (collective: hostnames are gathered).
std::string run_record(const TrainArgs& a, comm::Communicator& world) {
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::vector<char> all(sizeof host * static_cast<size_t>(world.size()));
  if (world.size() > 1) {
    world.all_gather(host, all.data(), sizeof host / 4, DType::f32);  // raw bytes: a copy, no arithmetic
  } else {
    std::copy(host, host + sizeof host, all.begin());
  }
  nlohmann::json hosts = nlohmann::json::object();
  for (int r = 0; r < world.size(); ++r) hosts[std::string(all.data() + sizeof host * static_cast<size_t>(r))].push_back(r);
  char now[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  nlohmann::json config = toml_lines_to_json(a.resolved);
  config["val-data"] = a.val_data;  // derived from --train-data when not given
  const nlohmann::json r = {{"run", "braid train"},  {"version", BRAID_VERSION}, {"commit", BRAID_COMMIT},
                            {"time", now},           {"ranks", world.size()},    {"backend", world.backend()},
                            {"hosts", hosts},        {"given", toml_lines_to_json(a.given)},
                            {"config", std::move(config)}};
  return r.dump();
}

// The largest of every rank's `v` (collective): a peak timed while a neighbour's
// work overlapped reads low, so the best rank's stands for all.
double best_over_ranks(comm::Communicator& world, double v) {
  float best = static_cast<float>(v);
  if (world.size() > 1) world.all_reduce(&best, &best, 1, DType::f32, comm::ReduceOp::max);
  return best;
}

// Each rank measures the matmul ceiling at its MLP shape; the best median is
// the reference, so a rank slowed by a noisy neighbour does not inflate
// everyone's MFU. Sets the trainer's ceiling and returns it (with this rank's
// spread).
kernels::MatmulCeiling measure_ceiling(train::Trainer& trainer, comm::Communicator& world) {
  const auto& pl = trainer.plan();
  // In the dtype the matmuls run in: a half-precision run's MFU is against the half-precision ceiling.
  const DType dt = trainer.model().matmul_dtype();
  kernels::MatmulCeiling c =
      kernels::measure_mlp_ceiling(pl.micro_batch * pl.seq_len, trainer.model().config().n_embd, pl.tp.degree, dt);
  c.flops = best_over_ranks(world, c.flops);
  trainer.set_peak_flops_per_rank(c.flops);
  return c;
}

// The metrics file's last record: every rank's peak bytes by memory category
// (`all`: per rank, kNumMemCategories values then the total).
void append_peak_memory(const std::string& path, const std::vector<uint64_t>& all, size_t per_rank, int ranks) {
  nlohmann::json rows = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    const uint64_t* v = all.data() + static_cast<size_t>(r) * per_rank;
    nlohmann::json cats = nlohmann::json::object();
    for (size_t c = 0; c < kNumMemCategories; ++c) cats[mem_category_name(static_cast<MemCategory>(c))] = v[c];
    rows.push_back({{"rank", r}, {"bytes", cats}, {"total", v[kNumMemCategories]}});
  }
  std::ofstream out(path, std::ios::app);
  out << nlohmann::json{{"peak_memory", rows}}.dump() << "\n";
  BRAID_CONFIG_CHECK(out.good(), "cannot append to --metrics-out ", path);
}

// The options line: what the user set (file or flags), as key=value.
void print_given_options(const std::string& given) {
  std::string line;
  const nlohmann::json options = toml_lines_to_json(given);  // outlives the loop over its items
  for (const auto& [k, v] : options.items())
    line += " " + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  std::printf("options:%s\n", line.c_str());
}

// The start-up lines: model, layout, batch, the reference FLOP/s MFU is
// measured against, the data-parallel transport and a warm-up longer than the run.
void print_run_header(train::Trainer& trainer, comm::Communicator& world, const kernels::MatmulCeiling& ceiling,
                      double fma_peak) {
  const auto& c = trainer.model().config();
  const auto& pl = trainer.plan();
  const train::TrainOptions& opt = trainer.options();
  const std::string path = kernels::matmul_path(pl.compute, trainer.model().half_matmuls());
  std::printf("braid train | model %s (L=%lld H=%lld C=%lld V=%lld->%lld, %.2fM params on rank 0) | ranks %d (%s, %s) | "
              "batch %lld = %d x %lld x %lld accum | T=%lld\n"
              "matmul ceiling per rank: %s | FMA peak %.1f GFLOP/s | %s\n",
              c.name.c_str(), (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd,
              (long long)c.vocab_size, (long long)c.padded_vocab_size,
              trainer.model().num_params() / 1e6, world.size(), pl.describe().c_str(),
              world.backend().c_str(), (long long)pl.global_batch, pl.dp.degree, (long long)pl.micro_batch,
              (long long)pl.pp.micro_batches, (long long)pl.seq_len, ceiling.describe().c_str(), fma_peak / 1e9, path.c_str());
  const std::string transport = trainer.data_parallel_transport();
  if (!transport.empty()) std::printf("data-parallel collectives: %s\n", transport.c_str());
  for (const std::string& line : parallel::describe_placement(pl)) std::printf("placement: %s\n", line.c_str());
  if (opt.warmup_steps > opt.steps)
    std::printf("note: --warmup %lld is longer than the run (--steps %lld): the learning rate stays below --lr %g\n",
                (long long)opt.warmup_steps, (long long)opt.steps, opt.lr);
  std::fflush(stdout);
}

// Every rank's peak bytes per memory category (collective): appended to
// --metrics-out by rank 0 and, with `log`, printed one line per rank.
void report_peak_memory(const train::Trainer& trainer, comm::Communicator& world, bool log) {
  std::vector<uint64_t> mine(kNumMemCategories + 1), all(mine.size() * size_t(world.size()));
  for (size_t c = 0; c < kNumMemCategories; ++c) mine[c] = trainer.ledger().peak(static_cast<MemCategory>(c));
  mine[kNumMemCategories] = trainer.ledger().peak_total();
  if (world.size() > 1) {
    // Raw 64-bit words travel as f32 pairs; all-gather copies bits without arithmetic.
    world.all_gather(mine.data(), all.data(), 2 * mine.size(), DType::f32);
  } else {
    all = mine;
  }
  const std::string& metrics = trainer.options().metrics_out;
  if (world.rank() == 0 && !metrics.empty()) append_peak_memory(metrics, all, mine.size(), world.size());
  if (!log) return;
  for (int r = 0; r < world.size(); ++r) {
    const uint64_t* v = all.data() + size_t(r) * mine.size();
    std::string line;
    for (size_t c = 0; c < kNumMemCategories; ++c)
      line += std::string(c ? " " : "") + mem_category_name(static_cast<MemCategory>(c)) + "=" +
              format_bytes(static_cast<double>(v[c]));
    std::printf("peak memory rank %d: %s total=%s\n", r, line.c_str(),
                format_bytes(static_cast<double>(v[kNumMemCategories])).c_str());
  }
}

// --sample-tokens after training, printed by rank 0. With sharded parameters
// every rank takes part in each forward. A run ended by a stop signal skips it.
void print_sample(train::Trainer& trainer, comm::Communicator& world, const data::Gpt2Tokenizer& tok) {
  const train::TrainOptions& opt = trainer.options();
  if (opt.sample_tokens <= 0 || trainer.stopped_at() >= 0) return;
  if (world.rank() != 0 && !trainer.forward_is_collective()) return;
  std::vector<int32_t> prompt = tok.encode(opt.sample_prompt);
  if (prompt.empty()) prompt.push_back(tok.eot());
  auto out = trainer.sample(prompt, opt.sample_tokens, opt.seed);
  if (world.rank() == 0) std::printf("\n--- sample (%lld tokens, temperature %.2f, top-k %lld) ---\n%s\n---\n",
              (long long)opt.sample_tokens, opt.sample_temperature, (long long)opt.sample_top_k,
              tok.decode(out).c_str());
  std::fflush(stdout);
}

// One rank's run: the trainer, its start-up report, training, the peak-memory
// report and the sample.
void train_rank(const TrainArgs& a, comm::Communicator& world, data::TokenView train,
                data::TokenView val) {
  train::TrainOptions opt = a.opt;
  const bool log = opt.verbose && world.rank() == 0;
  opt.run_record = run_record(a, world);
  if (log && !a.given.empty()) print_given_options(a.given);
  // The tokenizer is needed only to sample after training: load it now, so a
  // missing vocabulary file fails before the run, not after it.
  std::unique_ptr<data::Gpt2Tokenizer> tok;
  if (opt.sample_tokens > 0)
    tok = std::make_unique<data::Gpt2Tokenizer>(data::Gpt2Tokenizer::load(data::Gpt2Tokenizer::default_dir()));
  if (opt.resume == "auto") {
    // Found (and verified) once; the trainer takes the answer as its --resume.
    const std::string from = train::find_resume_file(opt, world);
    if (const int64_t done = train::finished_step(opt, from); done >= 0) {
      if (world.rank() == 0)
        std::printf("--resume auto: %s holds step %lld of --steps %lld: the run is finished, nothing to train "
                    "(pass a larger --steps to train on)\n", from.c_str(), (long long)done, (long long)opt.steps);
      return;
    }
    if (!from.empty()) opt.resume = from;
  }
  train::Trainer trainer(opt, world, train, val);
  const kernels::MatmulCeiling ceiling = measure_ceiling(trainer, world);
  const double fma_peak = best_over_ranks(world, kernels::measure_fma_peak_flops());
  if (log) print_run_header(trainer, world, ceiling, fma_peak);
  trainer.run();
  report_peak_memory(trainer, world, log);
  if (tok) print_sample(trainer, world, *tok);
  if (world.size() > 1) world.barrier();
}

// train_rank, with an error other than the user's named by the failing rank.
void run_rank(const TrainArgs& a, comm::Communicator& world, data::TokenView train,
              data::TokenView val) {
  try {
    train_rank(a, world, train, val);
  } catch (const ConfigError&) {
    throw;  // the user's to fix, the same on every rank: no rank prefix
  } catch (const std::exception& e) {
    // run_local names the failing rank itself; under MPI each process does it here.
    if (world.size() > 1 && world.backend() != "local")
      throw RankFailure(detail::concat("rank ", world.rank(), ": ", e.what()));
    throw;
  }
}

}  // namespace

data::MappedTokens load_tokens(const std::string& path, const char* what, const std::string& format,
                               int64_t model_vocab) {
  BRAID_CONFIG_CHECK(std::filesystem::exists(path), what, " data file '", path,
                     "' not found; run `braid prepare-data` from the repository root (scripts/train.sh "
                     "does), or pass --", what, "-data FILE");
  data::TokenFile f = data::read_token_file(path, data::parse_token_format(format));
  if (f.version < data::kTokenFileVersion)
    std::fprintf(stderr, "braid train: %s data file '%s' predates checksums (version %u): read unverified; "
                 "re-create it with `braid prepare-data` to have it checked\n", what, path.c_str(), f.version);
  // Token files written for another vocabulary would train on meaningless ids:
  // braid's own tokenizer's (GPT-2's), or the model's when it is another.
  const int64_t v = model::GPTConfig::preset("gpt2").vocab_size;
  BRAID_DATA_CHECK(f.vocab_size == v || f.vocab_size == model_vocab, what, " data file '", path,
                   "' was tokenized for a vocabulary of ", f.vocab_size, " but the model's is ", model_vocab,
                   " (braid's tokenizer: ", v, "); re-create it with `braid prepare-data`, or give the model ",
                   "that vocabulary (--vocab-size ", f.vocab_size, ")");
  return std::move(f.tokens);
}

namespace {

// Flags whose effect needs another flag: given alone they would silently do nothing.
void check_flags_that_do_something(const CLI::App& c, const train::TrainOptions& o) {
  auto given = [&](const char* f) { return c.count(f) > 0; };
  for (const char* f : {"--top-k", "--temperature", "--prompt"})
    BRAID_CONFIG_CHECK(!given(f) || o.sample_tokens > 0, f, " has no effect without --sample-tokens N; pass both");
  bool chunked = false;  // the schedule runs several chunks per rank
  for (const auto& d : parallel::schedules()) chunked = chunked || (o.schedule == d.name && d.chunks != 1);
  BRAID_CONFIG_CHECK(!given("--virtual-stages") || o.virtual_stages == 1 || chunked,
                     "--virtual-stages has no effect without --schedule interleaved");
  BRAID_CONFIG_CHECK(!given("--ranks") || c.get_option("--backend")->as<std::string>() == "local",
                     "--ranks sets the rank count of --backend local; under mpirun use -np");
  BRAID_CONFIG_CHECK(!given("--nodes") || c.get_option("--backend")->as<std::string>() == "local",
                     "--nodes places the ranks of --backend local; under MPI the node map is where mpirun "
                     "started each rank (a hostfile)");
}

// The output file's directory is created now; a directory or an unwritable
// place is refused before training.
void check_output_file(const char* flag, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  BRAID_CONFIG_CHECK(!fs::is_directory(file, ec), flag, " ", file, " is a directory; name a file inside it");
  const fs::path p(file);
  make_writable_directory(p.has_parent_path() ? p.parent_path().string() : ".", flag);
}

}  // namespace

namespace {

void add_data_options(CLI::App* c, TrainArgs& a) {
  const std::string g = "Data";
  c->add_option("--train-data", a.train_data, "Training token file (braid prepare-data)")->capture_default_str()->group(g);
  c->add_option("--val-data", a.val_data, "Validation token file ('' disables; with --train-data X_train.bin and no --val-data: X_val.bin when it exists)")->capture_default_str()->group(g);
  c->add_option("--data-format", a.data_format, "auto: braid's token files and llm.c's (by their magic); nanogpt: headerless uint16 GPT-2 ids (nanoGPT's prepare.py)")
      ->transform(one_of({"auto", "nanogpt"}))
      ->capture_default_str()->group(g);
}

void add_optimizer_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Optimizer";
  c->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str()->group(g);
  c->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str()->group(g);
  c->add_option("--min-lr", o.min_lr, "Final learning rate of the cosine decay")->capture_default_str()->group(g);
  c->add_option("--warmup", o.warmup_steps, "Linear warm-up steps")->capture_default_str()->group(g);
  c->add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str()->group(g);
  c->add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str()->group(g);
  c->add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str()->group(g);
  c->add_option("--grad-clip", o.grad_clip, "Clip the global gradient norm (0 disables)")->capture_default_str()->group(g);
  c->add_option("--seed", o.seed, "Seed for weights and data order")->capture_default_str()->group(g);
}

// The asynchronous parameter server's flags, beside --dp-mode ps.
void add_parameter_server_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Parallel layout";
  c->add_flag("--ps-async", o.ps_async, "Parameter server: apply each worker's gradient as it arrives")->group(g);
  c->add_option("--staleness", o.staleness, "Asynchronous PS: a worker may run at most this many iterations ahead of the slowest")->capture_default_str()->group(g);
}

void add_loss_scale_options(CLI::App* c, train::LossScaleOptions& s) {
  const std::string g = "Precision";
  c->add_option("--loss-scale", s.initial_scale, "fp16: initial dynamic loss scale")->capture_default_str()->group(g);
  c->add_option("--loss-scale-window", s.growth_interval, "fp16: clean steps before the scale grows")->capture_default_str()->group(g);
  c->add_option("--loss-scale-growth", s.growth_factor, "fp16: growth factor")->capture_default_str()->group(g);
  c->add_option("--loss-scale-backoff", s.backoff_factor, "fp16: back-off factor on overflow")->capture_default_str()->group(g);
  c->add_option("--loss-scale-hysteresis", s.hysteresis, "fp16: overflows tolerated before backing off")->capture_default_str()->group(g);
  c->add_option("--min-loss-scale", s.min_scale, "fp16: lower bound of the loss scale")->capture_default_str()->group(g);
}

// Validation, metrics, traces and the per-step lines.
void add_monitoring_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Validation and output";
  c->add_option("--val-every", o.val_every, "Validate every K steps (0 disables)")->capture_default_str()->group(g);
  c->add_option("--val-batches", o.val_batches, "Global batches per validation")->capture_default_str()->group(g);
  c->add_option("--metrics-out", o.metrics_out, "Write JSON lines: one per step and per validation")->group(g);
  c->add_option("--trace-out", o.trace_out, "Write one Chrome trace (open in Perfetto) of every rank: steps, each unit's forward and backward, buckets, gathers, reduce-scatters and waits (docs/USAGE.md)")->group(g);
  c->add_flag("--check-replicas", o.check_replicas, "Compare parameter hashes across DP ranks every step")->group(g);
  c->add_flag("--quiet", [&o](int64_t) { o.verbose = false; }, "Print nothing per step")->group(g);
}

void add_checkpoint_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Checkpoints";
  c->add_option("--save", o.save_dir,
                "Checkpoint directory: DIR/step_<N> at the end (and every --save-every steps), "
                "checksummed; a save counts once its metadata file is durable")
      ->type_name("DIR")->group(g);
  c->add_option("--checkpoint-format", o.checkpoint_format,
                "sharded: every rank writes its own pieces to DIR/step_<N>/ (no gather) | file: rank 0 "
                "gathers the whole state into DIR/step_<N>.ckpt")
      ->check(CLI::IsMember({"sharded", "file"}))->capture_default_str()->group(g);
  c->add_flag("--async-save", o.async_save,
              "Sharded saves: copy the state to a host staging buffer and write it from a background thread "
              "while training goes on (one save in flight; a failed write fails the run at the next step)")
      ->group(g);
  c->add_option("--save-every", o.save_every, "Also checkpoint every K steps (0: at the end only)")
      ->capture_default_str()->group(g);
  c->add_option("--keep-last", o.keep_last,
                "Keep the newest K checkpoints of --save DIR, pruning older ones once a new one is durable (0: all)")
      ->capture_default_str()->group(g);
  c->add_option("--resume", o.resume,
                "Resume from a checkpoint FILE, the newest that verifies in DIR, or 'auto' (the newest in "
                "--save DIR; a fresh start when it holds none)")
      ->type_name("DIR|auto|FILE")->group(g);
}

void add_sampling_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Sampling";
  c->add_option("--sample-tokens", o.sample_tokens, "Tokens to sample after training")->capture_default_str()->group(g);
  c->add_option("--prompt", o.sample_prompt, "Prompt for the sample")->capture_default_str()->group(g);
  c->add_option("--temperature", o.sample_temperature, "Sampling temperature")->capture_default_str()->group(g);
  c->add_option("--top-k", o.sample_top_k, "Sample from the k most likely tokens")->capture_default_str()->group(g);
}

// How the ranks run and talk: the backend, the collectives, memory and time limits.
void add_runtime_options(CLI::App* c, TrainArgs& a) {
  const std::string g = "Runtime";
  train::TrainOptions& o = a.opt;
  c->add_option("--backend", a.backend, "mpi (one process per rank) or local (ranks as threads)")
      ->transform(one_of({"mpi", "local"}))
      ->capture_default_str()->group(g);
  c->add_option("--ranks", a.local_ranks, "Ranks for --backend local")->capture_default_str()->group(g);
  c->add_option("--nodes", a.nodes,
                "--backend local: ranks per node joined by +, e.g. 2+1 (groups that span nodes take the "
                "hierarchical collectives, as on hosts placed that way)")
      ->group(g);
  c->add_option("--comm-algo", a.algo, "Collective implementation: ring (ours) or native (MPI's own)")
      ->transform(one_of({"ring", "native"}))
      ->capture_default_str()->group(g);
  c->add_option("--comm-timeout", a.comm.timeout_s,
                "Seconds any rank may wait in one communication call; then the job ends naming "
                "the ranks that never reached it (flight records beside --metrics-out)")
      ->check(CLI::PositiveNumber)->capture_default_str()->group(g);
  c->add_flag("--debug-collectives", a.comm.debug_collectives,
              "Before every collective, check that all ranks of the group call the same one "
              "(sequence number, op, count, dtype, root)")->group(g);
  c->add_option("--max-memory", [&o](const std::vector<std::string>& v) {
        o.max_memory = parse_size(v.at(0), "--max-memory");
        BRAID_CONFIG_CHECK(o.max_memory > 0, "--max-memory must be > 0");
        return true;
      }, "Memory one rank may use, e.g. 4GiB (default: its share of the host's available memory); "
         "a layout whose planned peak exceeds it fails before allocating")
      ->type_name("SIZE")->group(g);
}

// --inject-save-fault STEP:PHASE into o.save_fault_step (0-based) and o.save_fault.
void parse_save_fault(const std::string& s, train::TrainOptions& o) {
  const size_t colon = s.find(':');
  uint64_t step = 0;
  BRAID_CONFIG_CHECK(colon != std::string::npos && parse_count(s.substr(0, colon), step) && step >= 1 &&
                         step < (uint64_t{1} << 62),
                     "--inject-save-fault wants STEP:PHASE with STEP >= 1, got '", s, "'");
  o.save_fault_step = static_cast<int64_t>(step) - 1;
  o.save_fault = formats::parse_save_fault(s.substr(colon + 1));
}

// --inject-failure RANK:STEP[:KIND] into o.inject_failure_* (KIND throw when not given).
void parse_injected_failure(const std::string& s, train::TrainOptions& o) {
  int rank = -1;
  long long step = -1;
  int used = 0;
  const bool ok = std::sscanf(s.c_str(), "%d:%lld%n", &rank, &step, &used) == 2 && rank >= 0 && step >= 0;
  std::string kind = ok && used < static_cast<int>(s.size()) && s[static_cast<size_t>(used)] == ':'
                         ? s.substr(static_cast<size_t>(used) + 1) : "throw";
  BRAID_CONFIG_CHECK(ok && (used == static_cast<int>(s.size()) || s[static_cast<size_t>(used)] == ':'),
                     "--inject-failure wants RANK:STEP[:KIND] with non-negative integers, got '", s, "'");
  o.inject_failure_rank = rank;
  o.inject_failure_step = step;
  o.inject_failure_kind = kind;
}

// Faults the tests inject: a failing rank, a checkpoint writer dying mid-save.
void add_fault_injection_options(CLI::App* c, train::TrainOptions& o) {
  const std::string g = "Testing";
  c->add_option("--inject-save-fault", [&o](const std::vector<std::string>& v) {
        parse_save_fault(v.at(0), o);
        return true;
      }, "Testing: the writer of the checkpoint of STEP kills itself at PHASE (payload:BYTE, "
         "before-file-fsync, before-metadata, before-rename, before-dir-fsync), stops itself (payload-stop:BYTE, "
         "SIGSTOP, as a stalled host) or fails to write it (write-error); sharded saves: @RANK picks the rank whose "
         "piece file payload, before-file-fsync and write-error hit (default 0)")
      ->type_name("STEP:PHASE[@RANK]")->group(g);
  c->add_option("--inject-failure", [&o](const std::vector<std::string>& v) {
        parse_injected_failure(v.at(0), o);
        return true;
      }, "Testing: fail RANK at STEP; KIND throw (default), hang, stop (SIGSTOP) or kill (SIGKILL)")
      ->type_name("RANK:STEP[:KIND]")->group(g);
}

// Validation follows --train-data: X_train.bin is checked on X_val.bin when it
// exists, not silently on the default corpus.
void pair_validation_data(const CLI::App& c, TrainArgs& a) {
  if (!c.count("--train-data") || c.count("--val-data")) return;
  const std::string& t = a.train_data;
  const std::string suffix = "_train.bin";
  const bool paired = t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string v = paired ? t.substr(0, t.size() - suffix.size()) + "_val.bin" : "";
  a.val_data = !v.empty() && std::filesystem::exists(v) ? v : "";
  if (a.val_data.empty())
    std::fprintf(stderr, "braid train: no validation: %s has no _val.bin beside it; pass --val-data FILE\n",
                 t.c_str());
}

// Every output is created (its directory) or refused now, not after training;
// the communicators' flight records go beside --metrics-out.
void prepare_outputs(TrainArgs& a) {
  for (const auto& [flag, file] : {std::pair<const char*, std::string>{"--metrics-out", a.opt.metrics_out},
                                   {"--trace-out", a.opt.trace_out}})
    if (!file.empty()) check_output_file(flag, file);
  if (!a.opt.metrics_out.empty())
    a.comm.record_dir = std::filesystem::path(a.opt.metrics_out).parent_path().string();
  if (a.comm.record_dir.empty() && !a.opt.metrics_out.empty()) a.comm.record_dir = ".";
}

// The layout's checks, which need no rank: a layout that cannot run on
// `world_size` ranks is refused before ranks are spawned or data is read.
void check_layout(const train::TrainOptions& o, int world_size) {
  train::TrainOptions probe = o;
  parallel::resolve_plan(probe, world_size, parallel::model_config(probe));
  train::validate_training(probe, world_size);
}

// The token files, mapped once per process (local ranks, threads, share the
// map; MPI ranks on a node its pages).
struct TokenData {
  data::MappedTokens train, val;
};
TokenData load_data(const TrainArgs& a) {
  TokenData d;
  const int64_t vocab = parallel::model_config(a.opt).vocab_size;
  d.train = load_tokens(a.train_data, "train", a.data_format, vocab);
  if (!a.val_data.empty()) d.val = load_tokens(a.val_data, "val", a.data_format, vocab);
  return d;
}

// SIGTERM/SIGINT/SIGUSR1 stop the run at the next step boundary; under MPI
// the handler goes in after MPI_Init, so it is the one in force.
void run_local_ranks(const TrainArgs& a) {
  BRAID_CONFIG_CHECK(a.local_ranks >= 1, "--ranks ", a.local_ranks, " must be >= 1");
  BRAID_CONFIG_CHECK(a.opt.inject_failure_kind == "throw", "--inject-failure kind '",
                     a.opt.inject_failure_kind, "' needs one process per rank; use the mpi backend");
  // Checked before the ranks' threads exist (a rank count far beyond the batch
  // would otherwise allocate them all first).
  const comm::NodeMap nodes = a.nodes.empty() ? comm::NodeMap::one_node(a.local_ranks) : comm::NodeMap::parse(a.nodes);
  BRAID_CONFIG_CHECK(nodes.world() == a.local_ranks, "--nodes ", a.nodes, " places ", nodes.world(),
                     " ranks but --ranks is ", a.local_ranks, "; make the counts add up to --ranks");
  train::TrainOptions probe = a.opt;
  probe.nodes = nodes;
  check_layout(probe, a.local_ranks);
  const TokenData d = load_data(a);
  train::install_stop_handler();
  comm::run_local(nodes, [&](comm::Communicator& w) { run_rank(a, w, d.train, d.val); }, a.comm);
}

// True when no launcher started this process (none of the rank variables of
// OpenMPI, PMI or PMIx is set): it is a world of one.
bool launched_alone() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return false;
  return true;
}

void run_mpi_ranks(const TrainArgs& a) {
#ifdef BRAID_WITH_MPI
  // Alone, a refused layout or unreadable data fails before MPI_Init, whose
  // singleton start-up forks a daemon (about 0.4 s a refusal would wait for).
  std::optional<TokenData> alone;
  if (launched_alone()) {
    check_layout(a.opt, 1);
    alone = load_data(a);
  }
  comm::MpiRuntime mpi;
  auto world = mpi.world(a.comm);
  g_abort_job_on_error = world->size() > 1;
  check_layout(a.opt, world->size());
  const TokenData d = alone ? std::move(*alone) : load_data(a);
  train::install_stop_handler();
  run_rank(a, *world, d.train, d.val);
#else
  (void)a;
  throw ConfigError("this braid was built without MPI; use --backend local");
#endif
}

// Every option of `braid train` on `c`, bound to `a`.
void add_train_options(CLI::App* c, TrainArgs& a) {
  auto& o = a.opt;
  // A later flag overrides an earlier one, so scripts can append to defaults.
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_and_layout_options(c, o);
  add_parameter_server_options(c, o);
  add_loss_scale_options(c, o.loss_scale);
  add_data_options(c, a);
  add_optimizer_options(c, o);
  add_monitoring_options(c, o);
  add_checkpoint_options(c, o);
  add_sampling_options(c, o);
  add_runtime_options(c, a);
  add_fault_injection_options(c, o);
}

}  // namespace

train::TrainOptions parse_train_options(const std::vector<std::string>& args) {
  CLI::App app;
  TrainArgs a;
  add_train_options(app.add_subcommand("train"), a);
  add_config_option(app);
  std::vector<std::string> words = {"braid", "train"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::vector<std::string> expanded = expand_config(app, static_cast<int>(argv.size()), argv.data());
  std::vector<char*> cargv;
  for (std::string& w : expanded) cargv.push_back(w.data());
  try {
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    throw ConfigError(detail::concat("the braid train options of the command: ", e.what()));
  }
  return a.opt;
}

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "Train a GPT-2 model over MPI ranks (or threads): data, tensor and pipeline parallel");
  add_train_options(c, *a);
  c->callback([a, c] {
    // At once, and again after MPI_Init: a stop signal during start-up (a
    // supervisor's SIGUSR1 while ranks still launch) stops the run at its first
    // step boundary instead of killing the rank by the signal's default action.
    train::install_stop_handler();
    a->given = c->config_to_str(false, false);
    a->resolved = c->config_to_str(true, false);
    check_flags_that_do_something(*c, a->opt);
    pair_validation_data(*c, *a);
    a->opt.algo = comm::parse_algorithm(a->algo);
    BRAID_CONFIG_CHECK(a->backend == "mpi" || a->backend == "local", "--backend '", a->backend,
                       "' is not known; use mpi or local");
    prepare_outputs(*a);
    a->comm.stop_signal = [] { return train::stop_signal(); };
    if (a->backend == "local") return run_local_ranks(*a);
    run_mpi_ranks(*a);
  });
}

}  // namespace braid::cli
