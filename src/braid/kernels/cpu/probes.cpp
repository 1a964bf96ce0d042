#include "braid/kernels/cpu/probes.h"


#include <algorithm>
#include <cstdio>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/memory.h"
#include "braid/core/stopwatch.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/matmul.h"

namespace braid::kernels {

namespace {
using Clock = std::chrono::steady_clock;


// n elements of `dtype` with small deterministic values.
Buffer operand(int64_t n, DType dtype, int salt) {
  Buffer b(size_t(n) * dtype_size(dtype), MemCategory::workspace);
  for (int64_t i = 0; i < n; ++i) store_from_f32(b.data(), size_t(i), dtype, 0.001f * float((i + salt) % 97));
  return b;
}
}  // namespace

std::string MatmulCeiling::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s (%lldx%lld)(%lldx%lld): %.1f GFLOP/s (median of %d, spread %.1f%%)",
                dtype_name(dtype), (long long)M, (long long)K, (long long)K, (long long)N, flops / 1e9, probes,
                spread * 100);
  return buf;
}

MatmulCeiling measure_matmul_ceiling(int64_t M, int64_t K, int64_t N, DType dtype, int probes,
                                     double probe_seconds) {
  BRAID_CHECK(M > 0 && K > 0 && N > 0 && probes > 0, "matmul ceiling: M=", M, " K=", K, " N=", N,
              " probes=", probes, " must be positive");
  Buffer a = operand(M * K, dtype, 0), w = operand(N * K, dtype, 1);
  Buffer c(size_t(M * N) * sizeof(float), MemCategory::workspace);
  auto run = [&] {
    gemm_typed(false, true, M, N, K, 1.f, a.data(), w.data(), dtype, 0.f, c.as<float>());
  };
  run();  // creates the primitive and touches the buffers
  const double flop = 2.0 * double(M) * double(N) * double(K);
  std::vector<double> rates;
  for (int p = 0; p < probes; ++p) {
    const auto t0 = Clock::now();
    int64_t calls = 0;
    do {
      run();
      ++calls;
    } while (seconds_since(t0) < probe_seconds);
    rates.push_back(flop * double(calls) / seconds_since(t0));
  }
  std::sort(rates.begin(), rates.end());
  MatmulCeiling r;
  r.dtype = dtype, r.M = M, r.N = N, r.K = K, r.probes = probes;
  r.flops = rates[rates.size() / 2];
  r.spread = (rates.back() - rates.front()) / r.flops;
  return r;
}

MatmulCeiling measure_mlp_ceiling(int64_t tokens, int64_t n_embd, int tp, DType dtype) {
  return measure_matmul_ceiling(std::min<int64_t>(tokens, 4096), n_embd, 4 * n_embd / tp, dtype);
}

std::string matmul_path(DType compute, bool stored) {
  if (compute == DType::f32) return "matmuls run in f32";
  const std::string name = dtype_name(compute);
  if (!stored) return "matmuls run in f32 on " + name + "-rounded operands (--matmul-precision fp32)";
  if (half_matmul_supported(compute)) return "matmuls run in " + name + " x " + name + " -> f32 (oneDNN)";
  return "matmuls run in f32 on " + name + " operands widened exactly (oneDNN has no " + name +
         " matmul on this CPU)";
}

namespace {
// FMA throughput of the team over one window of about `seconds`, FLOP/s.
double fma_window(double seconds) {
  typedef float v16 __attribute__((vector_size(64)));
  constexpr int kChains = 16, kInner = 4096;
  const int threads = omp_threads();
  std::vector<double> flops(size_t(threads), 0.0);
  std::vector<float> sink(size_t(threads), 0.f);
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_thread_index();
    v16 acc[kChains];
    for (int j = 0; j < kChains; ++j) acc[j] = v16{} + float(j) * 1e-3f;
    const v16 m = v16{} + 0.999999f, b = v16{} + 1e-7f;
    int64_t fmas = 0;
    do {
      for (int i = 0; i < kInner; ++i)
        for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * m + b;  // contracted to one FMA per vector
      fmas += int64_t(kInner) * kChains;
    } while (seconds_since(t0) < seconds);
    float s = 0;
    for (int j = 0; j < kChains; ++j)
      for (int l = 0; l < 16; ++l) s += acc[j][l];
    *static_cast<volatile float*>(&sink[size_t(t)]) = s;  // keeps the chains live
    flops[size_t(t)] = double(fmas) * 16 * 2;
  }
  const double elapsed = seconds_since(t0);
  double total = 0;
  for (double f : flops) total += f;
  return total / elapsed;
}
}  // namespace

double measure_fma_peak_flops(double seconds) {
  // A peak is an upper bound that load can only lower: the best of 5 windows.
  double best = 0;
  for (int w = 0; w < 5; ++w) best = std::max(best, fma_window(seconds / 5));
  return best;
}

}  // namespace braid::kernels
