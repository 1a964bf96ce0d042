// `braid eval` and `braid sample`: use a trained model. The model's sizes come
// from the checkpoint; the layout flags are those of `braid train`, so a model
// can be scored or sampled on any layout (under mpirun, or --backend local).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "braid/commands.h"
#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/data/tokenizer.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/train/trainer.h"
#ifdef BRAID_WITH_MPI
#include "braid/comm/backends/mpi.h"
#endif

namespace braid::cli {

namespace {

struct UseArgs {
  train::TrainOptions opt;
  std::string checkpoint, data, backend = "mpi", tokenizer_dir = data::Gpt2Tokenizer::default_dir();
  std::string data_format = "auto";
  int local_ranks = 1;
  int64_t max_windows = 0;
  bool json = false;
  comm::CommOptions comm;
};

// The model's shape from the checkpoint's header; refuses size flags that would contradict it.
void take_model_from_checkpoint(const CLI::App& c, UseArgs& a) {
  const std::string cmd = c.get_name();
  for (const char* f : {"--model", "--n-layer", "--n-head", "--n-embd", "--vocab-size", "--block-size", "--n-kv-head",
                        "--mlp-hidden", "--rope-theta"})
    BRAID_CONFIG_CHECK(c.count(f) == 0, f, " does not apply to braid ", cmd, ": the model's sizes come from --checkpoint");
  for (const char* f : {"--batch", "--micro-batches"})
    BRAID_CONFIG_CHECK(c.count(f) == 0, f, " does not apply to braid ", cmd,
                       ": every rank takes --micro-batch sequences per forward");
  BRAID_CONFIG_CHECK(c.count("--dropout") == 0, "--dropout does not apply to braid ", cmd,
                     ": evaluation and sampling run without dropout");
  const nlohmann::json h = formats::verify_any_checkpoint(a.checkpoint);
  auto& o = a.opt;
  o.model = h.at("model").get<std::string>();
  o.n_layer = h.at("n_layer").get<int64_t>();
  o.n_head = h.at("n_head").get<int64_t>();
  o.n_embd = h.at("n_embd").get<int64_t>();
  o.vocab_size = h.at("vocab_size").get<int64_t>();
  o.block_size = h.value("block_size", int64_t{0});
  o.checkpoint_model = formats::header_config(h);  // with the block parts the header records
  o.steps = 1;
  o.val_every = 0;
  o.check_replicas = false;
  o.verbose = false;
}

// Every rank builds the trainer of the layout and loads the weights; the
// global batch is one micro-batch per DP rank.
std::unique_ptr<train::Trainer> make_trainer(UseArgs& a, comm::Communicator& world, data::TokenView data) {
  train::TrainOptions o = a.opt;
  if (o.micro_batch == parallel::kMicroBatchAuto) o.micro_batch = parallel::kMicroBatchAutoMax;  // no batch to divide
  const int dp = o.tp > 0 && o.pp > 0 ? world.size() / (o.tp * o.pp) : 1;
  o.global_batch = o.micro_batch * std::max(dp, 1);
  auto t = std::make_unique<train::Trainer>(o, world, data, data::TokenView());
  t->load_weights(a.checkpoint);
  return t;
}

template <typename F>
void on_ranks(UseArgs& a, F body) {
  BRAID_CONFIG_CHECK(a.backend == "mpi" || a.backend == "local", "--backend '", a.backend,
                     "' is not known; use mpi or local");
  auto guarded = [&](comm::Communicator& w) {
    try {
      body(w);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      if (w.size() > 1 && w.backend() != "local") throw RankFailure(detail::concat("rank ", w.rank(), ": ", e.what()));
      throw;
    }
  };
  if (a.backend == "local") {
    BRAID_CONFIG_CHECK(a.local_ranks >= 1, "--ranks ", a.local_ranks, " must be >= 1");
    comm::run_local(a.local_ranks, guarded, a.comm);
    return;
  }
#ifdef BRAID_WITH_MPI
  comm::MpiRuntime mpi;
  auto world = mpi.world(a.comm);
  g_abort_job_on_error = world->size() > 1;
  guarded(*world);
#else
  throw ConfigError("this braid was built without MPI; use --backend local");
#endif
}

void add_common(CLI::App* c, UseArgs& a) {
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_option("--checkpoint", a.checkpoint, "braid checkpoint: a step_<N> directory or file of braid train --save, or braid import's file")
      ->required()
      ->check(CLI::ExistingPath);
  add_model_and_layout_options(c, a.opt);
  // Still parsed (take_model_from_checkpoint refuses them by name), but not offered.
  for (const char* f : {"--model", "--n-layer", "--n-head", "--n-embd", "--vocab-size", "--block-size", "--n-kv-head",
                        "--mlp-hidden", "--rope-theta", "--dropout"})
    if (CLI::Option* o = c->get_option_no_throw(f)) o->group("");
  c->add_option("--backend", a.backend, "mpi (one process per rank) or local (ranks as threads)")
      ->transform(one_of({"mpi", "local"}))
      ->capture_default_str();
  c->add_option("--ranks", a.local_ranks, "Ranks for --backend local")->capture_default_str();
  c->add_option("--comm-timeout", a.comm.timeout_s, "Seconds any rank may wait in one communication call")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void run_eval(const CLI::App& c, UseArgs& a) {
  take_model_from_checkpoint(c, a);
  BRAID_CONFIG_CHECK(std::filesystem::exists(a.data), "--data ", a.data, " not found; pass a token file ",
                     "(braid prepare-data writes data/<name>_val.bin)");
  const data::MappedTokens tokens = load_tokens(a.data, "eval", a.data_format, a.opt.checkpoint_model->vocab_size);
  on_ranks(a, [&](comm::Communicator& w) {
    auto t = make_trainer(a, w, tokens);
    const train::Trainer::WindowLoss r = t->evaluate_windows(tokens, a.max_windows);
    if (w.rank() != 0) return;
    const double tps = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0;
    if (a.json) {
      const nlohmann::json j = {{"checkpoint", a.checkpoint}, {"data", a.data}, {"loss", r.loss},
                                {"perplexity", std::exp(r.loss)}, {"windows", r.windows},
                                {"seq_len", t->options().seq_len}, {"tokens", r.tokens}, {"tokens_per_sec", tps},
                                {"layout", t->plan().describe()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("braid eval | %s on %s | %lld windows x %lld tokens | %s\nloss %.6f | perplexity %.3f | %.0f tokens/s\n",
                  a.checkpoint.c_str(), a.data.c_str(), (long long)r.windows, (long long)t->options().seq_len,
                  t->plan().describe().c_str(), r.loss, std::exp(r.loss), tps);
    }
    std::fflush(stdout);
  });
}

void run_sample(const CLI::App& c, UseArgs& a) {
  take_model_from_checkpoint(c, a);
  BRAID_CONFIG_CHECK(a.opt.sample_tokens >= 1, "--max-new-tokens ", a.opt.sample_tokens, " must be >= 1");
  const data::Gpt2Tokenizer tok = data::Gpt2Tokenizer::load(a.tokenizer_dir);
  std::vector<int32_t> prompt = tok.encode(a.opt.sample_prompt);
  if (prompt.empty()) prompt.push_back(tok.eot());
  for (int32_t id : prompt)
    BRAID_CONFIG_CHECK(id < a.opt.vocab_size, "the prompt's token ", id, " is outside the model's vocabulary of ",
                       a.opt.vocab_size, "; use a prompt of tokens below it");
  // The trainer's data sampler wants a stream of at least one window; sampling never reads it.
  const std::vector<uint16_t> filler(static_cast<size_t>(model::GPTConfig::preset(a.opt.model).block_size) + 2, 0);
  on_ranks(a, [&](comm::Communicator& w) {
    auto t = make_trainer(a, w, filler);
    const std::vector<int32_t> out = t->sample(prompt, a.opt.sample_tokens, a.opt.seed);
    if (w.rank() != 0) return;
    std::printf("%s\n", tok.decode(out).c_str());
    std::fflush(stdout);
  });
}

}  // namespace

void add_eval(CLI::App& app) {
  auto a = std::make_shared<UseArgs>();
  CLI::App* c = app.add_subcommand("eval", "Loss and perplexity of a checkpoint's model on a token file, in consecutive windows of --seq-len");
  add_common(c, *a);
  c->add_option("--data", a->data, "Token file to score (braid prepare-data, or llm.c's)")->required();
  c->add_option("--data-format", a->data_format, "auto: braid's and llm.c's token files (by their magic); nanogpt: headerless uint16 GPT-2 ids")
      ->transform(one_of({"auto", "nanogpt"}))
      ->capture_default_str();
  c->add_option("--max-windows", a->max_windows, "Score at most N windows from the file's start (0: every whole window)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_flag("--json", a->json, "Print one JSON object instead of text");
  c->callback([a, c] { run_eval(*c, *a); });
}

void add_sample(CLI::App& app) {
  auto a = std::make_shared<UseArgs>();
  a->opt.sample_tokens = 64;
  a->opt.sample_prompt = "";
  CLI::App* c = app.add_subcommand("sample", "Generate text from a checkpoint's model after a prompt");
  add_common(c, *a);
  c->add_option("--prompt", a->opt.sample_prompt, "Text to continue (empty: start from <|endoftext|>)")->capture_default_str();
  c->add_option("--max-new-tokens", a->opt.sample_tokens, "Tokens to generate (>= 1)")->capture_default_str();
  c->add_option("--temperature", a->opt.sample_temperature, "Sampling temperature (> 0; lower is greedier)")
      ->capture_default_str();
  c->add_option("--top-k", a->opt.sample_top_k, "Sample from the k most likely tokens (>= 1)")->capture_default_str();
  c->add_option("--seed", a->opt.seed, "Seed of the sampler")->capture_default_str();
  c->add_option("--tokenizer-dir", a->tokenizer_dir, "Directory with encoder.json and vocab.bpe")->capture_default_str();
  c->callback([a, c] { run_sample(*c, *a); });
}

}  // namespace braid::cli
