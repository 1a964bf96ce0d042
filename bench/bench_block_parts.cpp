// `braid bench-block-parts`: the Llama-family block's elementwise parts alone,
// forward + backward, on random inputs of one shape: RMSNorm over C features,
// rotary positions on the q and k heads of a packed [q | k | v] row, SwiGLU
// over H features. Reports each part's median forward and backward times over
// the repetitions, one JSON object per line (bench/torch_block_parts.py times
// PyTorch's eager compositions of the same formulas beside it).

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/rmsnorm.h"
#include "braid/kernels/cpu/rope.h"
#include "braid/kernels/cpu/swiglu.h"

namespace braid::cli {

namespace {

struct BlockPartsArgs {
  int64_t B = 8, T = 128, C = 256, hidden = 688, heads = 4, kv_heads = 2, reps = 9;
  double theta = 500000.0;
  int threads = 0;
};

std::vector<float> normals(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rand_normal(11, stream, i);
  return v;
}

void report(const BlockPartsArgs& a, const char* part, std::pair<double, double> ms) {
  const nlohmann::json j = {{"part", part},     {"B", a.B},           {"T", a.T},
                            {"C", a.C},         {"hidden", a.hidden}, {"heads", a.heads},
                            {"kv_heads", a.kv_heads}, {"threads", braid::omp_threads()},
                            {"forward_ms", ms.first}, {"backward_ms", ms.second}};
  std::printf("%s\n", j.dump().c_str());
}

void bench_rmsnorm(const BlockPartsArgs& a) {
  const int64_t N = a.B * a.T;
  const auto x = normals(size_t(N * a.C), 1), w = normals(size_t(a.C), 2), dy = normals(size_t(N * a.C), 3);
  std::vector<float> y(x.size()), rstd(static_cast<size_t>(N)), dx(x.size()), dw(static_cast<size_t>(a.C));
  report(a, "rmsnorm", time_forward_backward(a.reps, [&] { kernels::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, a.C); },
                                 [&] {
                                   std::fill(dx.begin(), dx.end(), 0.0f), std::fill(dw.begin(), dw.end(), 0.0f);
                                   kernels::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                                                             rstd.data(), N, a.C);
                                 }));
}

void bench_rope(const BlockPartsArgs& a) {
  const int64_t hs = a.C / a.heads, width = (a.heads + 2 * a.kv_heads) * hs;
  std::vector<int64_t> pos(size_t(a.T));
  std::iota(pos.begin(), pos.end(), int64_t(0));
  // The angles' table is made once a micro-batch and read by every layer: untimed.
  const auto tb = kernels::rope_table(pos.data(), a.T, kernels::rope_inverse_frequencies(hs, a.theta));
  auto qkv = normals(size_t(a.B * a.T * width), 4);
  // q and k: the query heads, then the key heads, one call each (as a model rotates them).
  const kernels::RopeHeads q{width, 0, a.heads, hs}, k{width, a.heads * hs, a.kv_heads, hs};
  auto turn = [&](auto fn) {
    fn(qkv.data(), a.B, a.T, q, tb);
    fn(qkv.data(), a.B, a.T, k, tb);
  };
  report(a, "rope", time_forward_backward(a.reps, [&] { turn(kernels::rope_forward); }, [&] { turn(kernels::rope_backward); }));
}

void bench_swiglu(const BlockPartsArgs& a) {
  const int64_t N = a.B * a.T;
  const auto x = normals(size_t(N * 2 * a.hidden), 5), dy = normals(size_t(N * a.hidden), 6);
  std::vector<float> y(dy.size()), dx(x.size());
  report(a, "swiglu", time_forward_backward(a.reps, [&] { kernels::swiglu_forward(y.data(), x.data(), N, a.hidden); },
                                [&] { kernels::swiglu_backward(dx.data(), dy.data(), x.data(), N, a.hidden); }));
}

void run_block_parts_bench(const BlockPartsArgs& a) {
  // Every check before the first part prints its line.
  BRAID_CONFIG_CHECK(a.C % a.heads == 0, "--width ", a.C, " must be a multiple of --heads ", a.heads);
  BRAID_CONFIG_CHECK(a.heads % a.kv_heads == 0, "--kv-heads ", a.kv_heads, " must divide --heads ", a.heads,
                     " (each key/value head serves a whole group of query heads)");
  BRAID_CONFIG_CHECK((a.C / a.heads) % 2 == 0, "rotary positions need an even head size: --width ", a.C,
                     " / --heads ", a.heads, " = ", a.C / a.heads);
  BRAID_CONFIG_CHECK(std::isfinite(a.theta) && a.theta > 1.0, "--rope-theta ", a.theta, " must be > 1 (Llama 3: 500000)");
  if (a.threads > 0) braid::set_omp_threads(a.threads);
  bench_rmsnorm(a);
  bench_rope(a);
  bench_swiglu(a);
}

}  // namespace

void add_bench_block_parts(CLI::App& app) {
  auto a = std::make_shared<BlockPartsArgs>();
  CLI::App* c = app.add_subcommand("bench-block-parts",
                                   "RMSNorm, rotary positions and SwiGLU alone, forward + backward: median times "
                                   "as JSON, one line a part");
  c->add_option("--batch", a->B, "Sequences B")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seq-len", a->T, "Sequence length T")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--width", a->C, "Model width C (RMSNorm's features; heads x head size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--hidden", a->hidden, "SwiGLU's hidden size H")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--heads", a->heads, "Query heads")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--kv-heads", a->kv_heads, "Key/value heads")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--rope-theta", a->theta, "RoPE base theta (> 1)")->capture_default_str();
  c->add_option("--reps", a->reps, "Timed repetitions (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--threads", a->threads, "OpenMP threads (0: OMP_NUM_THREADS)")->capture_default_str();
  c->callback([a] { run_block_parts_bench(*a); });
}

}  // namespace braid::cli
