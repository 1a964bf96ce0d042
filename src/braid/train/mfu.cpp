#include "braid/train/mfu.h"

#include <chrono>
#include <vector>

#include "braid/core/memory.h"
#include "braid/kernels/cpu/matmul.h"

namespace braid::train {

double measure_matmul_peak_flops(double seconds) {
  // The largest matmul of a GPT-2 small step (MLP c_fc at 256 tokens); the
  // backend's throughput here is the ceiling the model's matmuls can reach.
  const int64_t M = 256, K = 768, N = 3072;
  Buffer a(M * K * 4, MemCategory::workspace), b(K * N * 4, MemCategory::workspace),
      c(M * N * 4, MemCategory::workspace);
  for (int64_t i = 0; i < M * K; ++i) a.as<float>()[i] = 0.001f * static_cast<float>(i % 97);
  for (int64_t i = 0; i < K * N; ++i) b.as<float>()[i] = 0.001f * static_cast<float>(i % 89);
  using Clock = std::chrono::steady_clock;
  kernels::gemm(false, true, M, N, K, 1.f, a.as<float>(), b.as<float>(), 0.f, c.as<float>());  // warm-up
  std::vector<double> rates;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    kernels::gemm(false, true, M, N, K, 1.f, a.as<float>(), b.as<float>(), 0.f, c.as<float>());
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(2.0 * M * N * K / dt);
  } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds || rates.size() < 3);
  // Best of the runs: the ceiling, not a noisy average.
  double best = 0;
  for (double r : rates) best = r > best ? r : best;
  return best;
}

}  // namespace braid::train
