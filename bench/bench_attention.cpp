// `braid bench-attention`: causal self-attention alone, forward + backward, for
// the fused O(T) kernel (kernels/cpu/flash_attention.h) or the kernel that saves
// the probability matrix (kernels/cpu/attention.h), on random q, k, v of one
// shape. Reports the median forward and backward times over the repetitions,
// the bytes of the kernel's own buffers (saved tensors and workspace; q, k, v,
// the output and the gradients are the same for both) and the process's peak
// resident memory, one JSON object per line, so a table can run each kernel in
// a process of its own and read its peak.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_timing.h"
#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/model/memory_plan.h"

namespace braid::cli {

namespace {

struct AttentionBenchArgs {
  std::string kernel = "fused", dtype = "f32";
  int64_t B = 1, heads = 12, kv_heads = 0, head_dim = 64, T = 1024, reps = 5;  // kv_heads 0: heads
  int threads = 0;
};

// The kernel's buffers, allocated once; forward() and backward() run it.
struct AttentionRun {
  const AttentionBenchArgs& a;
  DType t;
  kernels::AttentionHeads heads;
  int64_t C;
  size_t part, packed;  // elements of the output and of the packed q, k, v
  std::vector<float> qkv, out, out_store, dout, dqkv, qkvr, saved, fscratch, bscratch;

  AttentionRun(const AttentionBenchArgs& args, DType dtype)
      : a(args),
        t(dtype),
        heads{args.heads, args.kv_heads > 0 ? args.kv_heads : args.heads, args.head_dim},
        C(heads.q_width()),
        part(size_t(args.B * args.T * C)),
        packed(size_t(args.B * args.T * heads.qkv_width())) {
    const bool fused = a.kernel == "fused";
    BRAID_CONFIG_CHECK(fused || heads.NKV == heads.NH, "--kv-heads ", heads.NKV,
                       " needs --kernel fused (the unfused kernel is multi-head only)");
    BRAID_CONFIG_CHECK(heads.NH % heads.NKV == 0, "--kv-heads ", heads.NKV, " must divide --heads ", heads.NH,
                       " (each key/value head serves a whole group of query heads)");
    std::vector<float> x(packed);
    for (size_t i = 0; i < x.size(); ++i) x[i] = rand_normal(7, 1, i);
    qkv.resize(model::operand_floats(packed, t));
    kernels::cast_from_f32(qkv.data(), t, x.data(), x.size());
    out.resize(part), out_store.resize(model::operand_floats(part, t)), dout.resize(part), dqkv.resize(packed);
    for (size_t i = 0; i < part; ++i) dout[i] = rand_normal(7, 2, i);
    qkvr.resize(model::operand_floats(packed, t));
    const size_t BHT = size_t(a.B * a.heads * a.T);
    saved.resize(fused ? kernels::flash_attention_lse_floats(a.B, a.T, a.heads) : model::operand_floats(BHT * size_t(a.T), t));
    fscratch.resize(fused ? 0 : kernels::attention_forward_scratch_floats(a.B, a.T, C, a.heads, t));
    bscratch.resize(fused ? kernels::flash_attention_backward_scratch_floats(a.B, a.T, heads, t)
                          : kernels::attention_backward_scratch_floats(a.B, a.T, C, a.heads, t));
  }
  size_t kernel_bytes() const { return (qkvr.size() + saved.size() + std::max(fscratch.size(), bscratch.size())) * 4; }

  void forward() {
    if (a.kernel == "fused")
      kernels::flash_attention_forward(out.data(), qkvr.data(), saved.data(), qkv.data(), t, a.B, a.T, heads, t);
    else
      kernels::attention_forward(out.data(), qkvr.data(), saved.data(), fscratch.data(), qkv.data(), t, a.B, a.T, C,
                                 a.heads, t);
    kernels::cast_from_f32(out_store.data(), t, out.data(), part);  // what a model keeps for backward
  }
  void backward() {
    if (a.kernel == "fused")
      kernels::flash_attention_backward(dqkv.data(), bscratch.data(), dout.data(), out_store.data(), qkvr.data(),
                                        saved.data(), t, a.B, a.T, heads, t);
    else
      kernels::attention_backward(dqkv.data(), bscratch.data(), dout.data(), qkvr.data(), saved.data(), t, a.B, a.T,
                                  C, a.heads, t);
  }
};

void run_attention_bench(const AttentionBenchArgs& a) {
  if (a.threads > 0) braid::set_omp_threads(a.threads);
  AttentionRun run(a, parse_dtype(a.dtype));
  const auto [fwd_ms, bwd_ms] = time_forward_backward(a.reps, [&] { run.forward(); }, [&] { run.backward(); });
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const nlohmann::json j = {{"kernel", a.kernel}, {"dtype", a.dtype},   {"B", a.B},
                            {"heads", a.heads},   {"kv_heads", run.heads.NKV}, {"head_dim", a.head_dim}, {"T", a.T},
                            {"threads", braid::omp_threads()}, {"forward_ms", fwd_ms},
                            {"backward_ms", bwd_ms}, {"kernel_bytes", run.kernel_bytes()},
                            {"peak_rss_bytes", int64_t(ru.ru_maxrss) * 1024}};
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void add_bench_attention(CLI::App& app) {
  auto a = std::make_shared<AttentionBenchArgs>();
  CLI::App* c = app.add_subcommand("bench-attention",
                                   "Causal attention alone, forward + backward: the fused kernel or the one that "
                                   "saves the probabilities; median times, buffer bytes and peak memory as JSON");
  c->add_option("--kernel", a->kernel, "fused (O(T) memory) or unfused (saves B x heads x T x T probabilities)")
      ->check(CLI::IsMember({"fused", "unfused"}))
      ->capture_default_str();
  c->add_option("--dtype", a->dtype, "Operand dtype: f32, bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  c->add_option("--batch", a->B, "Sequences")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--heads", a->heads, "Heads")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--kv-heads", a->kv_heads,
                 "Key/value heads shared by groups of query heads (grouped-query attention; 0: --heads)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--head-dim", a->head_dim, "Features per head")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seq-len", a->T, "Sequence length T")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--reps", a->reps, "Timed repetitions (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS)")->capture_default_str();
  c->callback([a] { run_attention_bench(*a); });
}

}  // namespace braid::cli
