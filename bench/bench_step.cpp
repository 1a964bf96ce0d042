// `braid bench-step`: training-step throughput of one rank (forward, backward,
// AdamW) and MFU against the fp32 matmul throughput measured in the same run.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "braid/commands.h"
#include "braid/core/memory.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/adamw.h"
#include "braid/model/gpt.h"
#include "braid/train/mfu.h"

namespace braid::cli {

namespace {
struct StepBenchArgs {
  std::string model = "gpt2";
  int64_t B = 4, T = 64, steps = 10, warmup = 2;
  int threads = 0;
  std::string json;
};

void run_step_bench(const StepBenchArgs& a) {
  if (a.threads > 0) braid::set_omp_threads(a.threads);
  const auto cfg = model::GPTConfig::preset(a.model);
  MemoryLedger ledger;
  model::GPT gpt(cfg, a.B, a.T, &ledger);
  gpt.init_weights(1);
  const size_t n = gpt.num_params();
  Buffer m(n * 4, MemCategory::optimizer, &ledger), v(n * 4, MemCategory::optimizer, &ledger);
  std::vector<int32_t> tok(static_cast<size_t>(a.B * (a.T + 1)));
  Rng rng(5);
  for (auto& t : tok) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  std::vector<int32_t> x(static_cast<size_t>(a.B * a.T)), y(x.size());
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t t = 0; t < a.T; ++t) {
      x[static_cast<size_t>(b * a.T + t)] = tok[static_cast<size_t>(b * (a.T + 1) + t)];
      y[static_cast<size_t>(b * a.T + t)] = tok[static_cast<size_t>(b * (a.T + 1) + t + 1)];
    }
  const double peak = train::measure_matmul_peak_flops(1.0);
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms, fwd_ms;
  for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
    const auto t0 = Clock::now();
    gpt.zero_grad();
    gpt.forward(x.data(), y.data(), a.B, a.T);
    const auto t1 = Clock::now();
    gpt.backward(1.0f);
    for (const auto& p : gpt.param_table())
      kernels::adamw_update(gpt.params() + p.offset, gpt.grads() + p.offset, m.as<float>() + p.offset,
                            v.as<float>() + p.offset, p.numel, 1e-4f, 0.9f, 0.95f, 1e-8f,
                            p.weight_decay ? 0.1f : 0.f, s + 1);
    const auto t2 = Clock::now();
    if (s >= a.warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      fwd_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(fwd_ms.begin(), fwd_ms.end());
  const double med = ms[ms.size() / 2], fmed = fwd_ms[fwd_ms.size() / 2];
  const double tps = static_cast<double>(a.B * a.T) / (med * 1e-3);
  const double flops_tok = static_cast<double>(gpt.flops_per_token(a.T));
  const double mfu = flops_tok * tps / peak;
  std::printf("bench-step | model %s (%.1fM params) | B=%lld T=%lld | threads %d\n", cfg.name.c_str(),
              n / 1e6, (long long)a.B, (long long)a.T, braid::omp_threads());
  std::printf("matmul peak (fp32, oneDNN, same run): %.1f GFLOP/s\n", peak / 1e9);
  std::printf("step: median %.1f ms (forward %.1f ms) over %lld steps | %.1f tokens/s | %.2f GFLOP/token | MFU %.1f%%\n",
              med, fmed, (long long)a.steps, tps, flops_tok / 1e9, mfu * 100);
  std::printf("memory: %s\n", ledger.report().c_str());
  if (!a.json.empty()) {
    nlohmann::json j = {{"impl", "braid"}, {"model", cfg.name}, {"B", a.B}, {"T", a.T},
                        {"threads", braid::omp_threads()}, {"step_ms", med}, {"tokens_per_sec", tps},
                        {"mfu", mfu}, {"matmul_peak_flops", peak}, {"flops_per_token", flops_tok}};
    std::ofstream(a.json) << j.dump() << "\n";
  }
}
}  // namespace

void add_bench_step(CLI::App& app) {
  auto a = std::make_shared<StepBenchArgs>();
  CLI::App* c = app.add_subcommand("bench-step", "Training-step tokens/s and MFU on one rank");
  c->add_option("--model", a->model, "tiny, small or gpt2")->capture_default_str();
  c->add_option("--batch", a->B, "Sequences per step")->capture_default_str();
  c->add_option("--seq-len", a->T, "Sequence length")->capture_default_str();
  c->add_option("--steps", a->steps, "Timed steps")->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS)")->capture_default_str();
  c->add_option("--json", a->json, "Write the result as JSON");
  c->callback([a] { run_step_bench(*a); });
}

}  // namespace braid::cli
