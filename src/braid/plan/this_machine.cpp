#include "braid/plan/this_machine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/host_memory.h"
#include "braid/train/mfu.h"

namespace braid::plan {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes/s of a 64 MiB memcpy (read + write counted once each, as the
// element-wise kernels' traffic is), best of a few.
double memcpy_bandwidth() {
  const size_t n = size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * static_cast<double>(n) / best;
}

// One-way time of a message of `bytes` between two ranks: half the best round trip.
double one_way(comm::Communicator& c, std::vector<char>& buf, size_t bytes, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    if (c.rank() == 0) {
      c.send(buf.data(), bytes, 1, 1);
      c.recv(buf.data(), bytes, 1, 2);
    } else {
      c.recv(buf.data(), bytes, 0, 1);
      c.send(buf.data(), bytes, 0, 2);
    }
    best = std::min(best, seconds_since(t0) / 2);
  }
  return best;
}

// Least-squares alpha + n / beta over the ping-pong sizes.
Link fit_link(const std::vector<double>& n, const std::vector<double>& t) {
  const double k = static_cast<double>(n.size());
  double sn = 0, st = 0, snn = 0, snt = 0;
  for (size_t i = 0; i < n.size(); ++i) sn += n[i], st += t[i], snn += n[i] * n[i], snt += n[i] * t[i];
  const double slope = (k * snt - sn * st) / (k * snn - sn * sn);
  const double alpha = (st - slope * sn) / k;
  return {1.0 / std::max(slope, 1e-15), std::max(alpha, 1e-7)};
}

Link measure_link() {
  std::vector<double> sizes, times;
  comm::run_local(2, [&](comm::Communicator& c) {
    std::vector<char> buf(size_t{16} << 20, 1);
    for (size_t b = size_t{4} << 10; b <= buf.size(); b *= 4) {
      const double t = one_way(c, buf, b, 8);
      if (c.rank() == 0) sizes.push_back(static_cast<double>(b)), times.push_back(t);
    }
  });
  return fit_link(sizes, times);
}

}  // namespace

Cluster measure_this_machine() {
  Cluster c;
  c.name = "this-machine";
  const int threads = std::max(1, omp_get_max_threads());
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  c.accelerators_per_node = std::max(1, cores / threads);
  // The memory the host has free now, shared by the node's ranks.
  c.memory_bytes = static_cast<double>(host_memory_available().value_or(uint64_t{1} << 30)) / c.accelerators_per_node;
  const double f32 = train::measure_matmul_ceiling(1024, 768, 3072, DType::f32).flops;
  auto half = [&](DType t) {
    try {
      return std::max(f32, train::measure_matmul_ceiling(1024, 768, 3072, t).flops);
    } catch (const Error&) {
      return f32;  // no matmul for this dtype here: braid computes it in f32
    }
  };
  c.peak_fp32 = f32;
  c.peak_bf16 = half(DType::bf16);
  c.peak_fp16 = half(DType::f16);
  c.matmul_fraction = 1.0;
  c.memory_bandwidth = memcpy_bandwidth();
  c.intra_node = measure_link();
  c.inter_node = c.intra_node;
  c.links_per_node = c.accelerators_per_node;
  return c;
}

}  // namespace braid::plan
