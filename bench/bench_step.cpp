// `braid bench-step`: the training step of `braid train` on one rank (forward
// and backward of every micro-batch, gradient sync, AdamW), on random tokens,
// in any precision. Reports tokens/s and MFU against two ceilings measured in
// the same run: the matmul at the run's MLP shape (the median of 5 probes) and
// the cores' FMA peak; forward + backward MFU beside the whole step's.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/comm/backends/local.h"
#include "bench_timing.h"
#include "braid/commands.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/probes.h"
#include "braid/train/trainer.h"

namespace braid::cli {

namespace {
struct StepBenchArgs {
  std::string model = "gpt2";
  std::string precision = "fp32";
  std::string matmul_precision = "half";
  int64_t B = 4, T = 64, accum = 1, steps = 10, warmup = 2;
  int threads = 0;
  std::string json;
};

train::TrainOptions step_options(const StepBenchArgs& a) {
  train::TrainOptions o;
  o.model = a.model;
  o.precision = a.precision;
  o.matmul_precision = a.matmul_precision;
  o.micro_batch = a.B;
  o.global_batch = a.B * a.accum;
  o.seq_len = a.T;
  o.steps = a.warmup + a.steps;
  o.warmup_steps = 1;
  o.lr = 1e-4f, o.min_lr = 1e-5f;
  o.val_every = 0;
  o.verbose = false;
  return o;
}

void run_step_bench(const StepBenchArgs& a, comm::Communicator& world) {
  if (a.threads > 0) braid::set_omp_threads(a.threads);  // this rank's thread
  const train::TrainOptions opt = step_options(a);
  // Random tokens: enough windows for every step without repeats.
  std::vector<uint16_t> tokens(size_t(std::max<int64_t>(opt.global_batch * (a.T + 1) * opt.steps * 2, 1 << 16)));
  Rng rng(5);
  for (auto& t : tokens) t = static_cast<uint16_t>(rng.below(50257));
  train::Trainer trainer(opt, world, tokens, nullptr);
  const auto& pl = trainer.plan();
  const int64_t C = trainer.model().config().n_embd, BT = a.B * a.T;
  const bool native = trainer.model().half_matmuls();
  const kernels::MatmulCeiling ceil = kernels::measure_mlp_ceiling(BT, C, 1, trainer.model().matmul_dtype());
  const double fma = kernels::measure_fma_peak_flops();
  const auto records = trainer.run();
  std::vector<double> ms, fb_ms;
  for (size_t i = size_t(a.warmup); i < records.size(); ++i) {
    ms.push_back(records[i].ms);
    fb_ms.push_back(records[i].fwd_bwd_ms);
  }
  const double med = median(ms), fb = median(fb_ms);
  const double tokens_step = double(opt.global_batch * a.T);
  const double tps = tokens_step / (med * 1e-3);
  const double flops_tok = double(trainer.model().flops_per_token(a.T));
  const double mfu = flops_tok * tps / ceil.flops, mfu_fb = flops_tok * tokens_step / (fb * 1e-3) / ceil.flops;
  std::printf("bench-step | model %s (%.1fM params) | %s | B=%lld T=%lld x %lld micro-batches | threads %d\n",
              trainer.model().config().name.c_str(), double(trainer.model().num_params()) / 1e6,
              dtype_name(pl.compute), (long long)a.B, (long long)a.T, (long long)a.accum, braid::omp_threads());
  std::printf("matmul ceiling: %s | FMA peak %.1f GFLOP/s\n%s\n", ceil.describe().c_str(), fma / 1e9,
              kernels::matmul_path(pl.compute, native).c_str());
  std::printf("step: median %.1f ms (forward+backward %.1f ms) over %lld steps | %.1f tokens/s | %.3f GFLOP/token\n",
              med, fb, (long long)a.steps, tps, flops_tok / 1e9);
  std::printf("MFU: step %.1f%% | forward+backward %.1f%% | step vs FMA peak %.1f%%\n", mfu * 100, mfu_fb * 100,
              flops_tok * tps / fma * 100);
  std::printf("memory: %s\n", trainer.ledger().report().c_str());
  if (!a.json.empty()) {
    nlohmann::json j = {{"impl", "braid"},        {"model", trainer.model().config().name},
                        {"precision", a.precision}, {"matmul_precision", a.matmul_precision}, {"B", a.B},
                        {"T", a.T},                {"accum", a.accum},
                        {"threads", braid::omp_threads()}, {"step_ms", med},
                        {"fwd_bwd_ms", fb},        {"tokens_per_sec", tps},
                        {"mfu", mfu},              {"mfu_fwd_bwd", mfu_fb},
                        {"mfu_fma", flops_tok * tps / fma}, {"matmul_ceiling_flops", ceil.flops},
                        {"matmul_ceiling_spread", ceil.spread}, {"fma_peak_flops", fma},
                        {"flops_per_token", flops_tok},
                        {"params", trainer.model().num_params()},
                        {"activation_bytes", trainer.ledger().peak(MemCategory::activations)},
                        {"peak_bytes", trainer.ledger().peak_total()}};
    std::ofstream(a.json) << j.dump() << "\n";
  }
}
}  // namespace

void add_bench_step(CLI::App& app) {
  auto a = std::make_shared<StepBenchArgs>();
  CLI::App* c = app.add_subcommand("bench-step", "Training-step tokens/s and MFU on one rank");
  c->add_option("--model", a->model, "a model preset (braid train --help lists them: tiny, small, gpt2, llama-small, ...)")
      ->transform(one_of(model::GPTConfig::preset_names()))
      ->capture_default_str();
  c->add_option("--precision", a->precision, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}, CLI::ignore_case))
      ->capture_default_str();
  c->add_option("--matmul-precision", a->matmul_precision,
                "half: bf16 / fp16 operands stored in that dtype | fp32: rounded to it, stored and multiplied in f32")
      ->check(CLI::IsMember({"half", "fp32"}))
      ->capture_default_str();
  c->add_option("--batch", a->B, "Sequences per micro-batch")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seq-len", a->T, "Sequence length")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--accum", a->accum, "Micro-batches per step (gradient accumulation)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--steps", a->steps, "Timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS)")->capture_default_str();
  c->add_option("--json", a->json, "Write the result as JSON");
  c->callback([a] {
    comm::run_local(1, [&](comm::Communicator& world) { run_step_bench(*a, world); });
  });
}

}  // namespace braid::cli
